"""Threads under faults: an ``interrupt`` sent while the active run is mid-tool, with and
without kill -9 of a worker right after it, and two submitters racing on one thread.

Starts its own Redis, scripted LLM server (in this process) and two Celery workers (threads
pool), and stops them. Figures:

* ``stop_s`` — interrupt sent → the active run's ``done`` (cancelled), p50 / max;
* ``handoff_s`` — the stopped run's end → the new run's start (its first state), p50 / max;
* ``recovered`` — trials whose old run ended cancelled and new run succeeded / trials;
  ``stalled`` — trials where a run did not end within 60 s;
* ``duplicate_events`` — events published twice (seq seen twice), over every run;
* ``pairing_violations`` — LLM requests with a tool call not followed by exactly its results;
* ``race_one_active`` — racing pairs that got exactly one run / pairs.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from reactq.shared.redisconn import free_port, start_server
from reactq.shared.settings import Settings
from tests.pairing import pairing_problem
from tests.scripted_server import ScriptedServer, reply_text, reply_tool_calls

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 240.0


def _handler(request: dict[str, Any]) -> Any:
    """Stateless: the script of the last ``fault-`` user message, turns counted from it."""
    messages = request.get("messages") or []
    if request.get("stream"):
        return reply_text("answer")
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"
                and str(m.get("content", "")).startswith("fault-")), default=-1)
    if last < 0:
        return reply_text("ok")
    taken = sum(1 for m in messages[last:] if m.get("role") == "assistant")
    if str(messages[last]["content"]).startswith("fault-slow") and taken == 0:
        return reply_tool_calls([("s1", "slow", {"tag": "fault", "seconds": 2.0})])
    return reply_text("ok", delay=0.2 if "race" in str(messages[last]["content"]) else 0.0)


class _Procs:
    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="reactq-fault-threads-"))
        port = free_port()
        self.redis = start_server(port, self.tmp / "redis")
        self.url = f"redis://127.0.0.1:{port}/0"
        self.llm = ScriptedServer(_handler, models=("scripted",)).start()
        self.workers: list[subprocess.Popen[bytes]] = []

    def settings(self) -> Settings:
        return Settings(redis_url=self.url, model="scripted", tools="tests.integration.tools:TOOLS",
                        openai_api_key="k", openai_base_url=self.llm.base_url, lease_seconds=1.5)

    def start_worker(self) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("REACTQ_", "OPENAI_"))}
        env.update(REACTQ_REDIS_URL=self.url, OPENAI_BASE_URL=self.llm.base_url, OPENAI_API_KEY="k",
                   REACTQ_MODEL="scripted", REACTQ_TOOLS="tests.integration.tools:TOOLS",
                   REACTQ_LEASE_SECONDS="1.5", PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        name = f"ft{len(self.workers)}-{uuid.uuid4().hex[:4]}"
        log = self.tmp / f"{name}.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "reactq.workers.app", "worker", "-Q",
             "reactq.runs,reactq.tools", "--pool", "threads", "-c", "4", "-n", f"{name}@%h",
             "--without-mingle", "--without-gossip", "-l", "INFO"],
            cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while " ready." not in (log.read_text(errors="replace") if log.exists() else ""):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        self.workers.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def stop(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.kill(proc)
        self.llm.stop()
        self.redis.kill()
        self.redis.wait()


def _wait(pred: Any, timeout: float = 60.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise TimeoutError("condition not met")


def _trial(p: _Procs, d: Any, kill: bool, figures: dict[str, list[float]]) -> bool:
    from reactq.shared.requests import RunRequest

    tid = f"fault-{uuid.uuid4().hex[:8]}"
    h1 = d.submit(RunRequest(query=f"fault-slow {tid}", thread_id=tid, completion_check=False))
    _wait(lambda: d.redis.hget(d.keys.run(h1.run_id), "turn"))  # mid-tool
    sent = time.time()
    h2 = d.submit(RunRequest(query=f"fault-new {tid}", thread_id=tid, multitask_strategy="interrupt",
                             completion_check=False))
    if kill:
        victim = p.workers[0]
        p.kill(victim)
        p.workers.remove(victim)
        p.start_worker()
    r1 = h1.result(timeout=60)
    r2 = h2.result(timeout=60)
    s1, s2 = d.store.load(h1.run_id).state, d.store.load(h2.run_id).state
    figures["stop_s"].append(s1.ended_at - sent)
    figures["handoff_s"].append(max(0.0, s2.started_at - s1.ended_at))
    for rid in (h1.run_id, h2.run_id):
        seqs = [e.seq for _, e in d.handle(rid).events(timeout=30)]
        figures["duplicates"].append(float(len(seqs) - len(set(seqs))))
    return r1["status"] == "cancelled" and r2["status"] == "succeeded"


def _race(d_a: Any, d_b: Any) -> bool:
    from reactq.shared.requests import RunRequest

    tid = f"fault-race-{uuid.uuid4().hex[:8]}"
    out: list[Any] = [None, None]
    barrier = threading.Barrier(2)

    def go(i: int, d: Any) -> None:
        barrier.wait()
        out[i] = d.submit(RunRequest(query=f"fault-race {tid}", thread_id=tid, completion_check=False))

    ts = [threading.Thread(target=go, args=(i, d)) for i, d in enumerate((d_a, d_b))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    created = [h for h in out if h is not None and h.created]
    ok = len(created) == 1 and all(h is not None and h.run_id == created[0].run_id for h in out)
    if created:
        created[0].result(timeout=60)
    return ok


def _p(xs: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(xs), 3), "max": round(max(xs), 3)} if xs else {}


def run(trials: int = 5, races: int = 10) -> dict[str, Any]:
    from reactq.dispatcher.client import Dispatcher

    began = time.monotonic()
    p = _Procs()
    try:
        p.start_worker()
        p.start_worker()
        d = Dispatcher(p.settings())
        out: dict[str, Any] = {}
        for kill in (False, True):
            figures: dict[str, list[float]] = {"stop_s": [], "handoff_s": [], "duplicates": []}
            ok = stalled = tried = 0
            for _ in range(trials):
                if time.monotonic() - began > DEADLINE_S:
                    break
                tried += 1
                try:
                    ok += _trial(p, d, kill, figures)
                except TimeoutError:
                    stalled += 1
            out["kill9" if kill else "no_kill"] = {
                "recovered": f"{ok}/{tried}", "stalled": stalled, "stop_s": _p(figures["stop_s"]),
                "handoff_s": _p(figures["handoff_s"]), "duplicate_events": int(sum(figures["duplicates"]))}
        d2 = Dispatcher(p.settings())
        won = sum(_race(d, d2) for _ in range(races))
        out["race_one_active"] = f"{won}/{races}"
        out["pairing_violations"] = sum(1 for r in p.llm.requests if pairing_problem(r.body))
        out["llm_requests"] = len(p.llm.requests)
        out["elapsed_s"] = round(time.monotonic() - began, 1)
        return out
    finally:
        p.stop()
