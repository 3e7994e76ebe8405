"""Fault module ``tools``: a GIL-holding tool, a kill -9 during it, a poison-pill call, a
call past its deadline. Real workers (threads pool, or prefork with
``REACTQ_FAULTS_POOL=prefork``; the default 3 s lease), a real Redis-compatible server, the
scripted LLM over HTTP.

Figures:

* ``gil_hold``: a non-idempotent tool holds the GIL for ``REACTQ_FAULTS_GIL_SECONDS`` (60;
  the workers run with ``REACTQ_TOOL_TIMEOUT`` 30 s longer)
  in one C call: ``executions`` (completed), ``starts``, ``uncertain`` (``tool_uncertain``
  errors), ``observation_s`` (submit → the call's result event), ``status``.
* ``gil_kill``: the worker is killed with -9 while the tool holds the GIL:
  ``resumed_after_s`` (kill → the call started on another worker; must be < 5),
  ``runner_died_with_worker``, ``executions``, ``status``.
* ``poison``: ``round(1, -10**8)`` and friends (calculator), a quadratic-regex text
  (text_stats): ``calls``, ``refused``, ``observation_s``, ``workers_alive``, ``status``.
* ``deadline``: a tool with ``timeout=2`` holding the GIL for 20 s: ``observation_s``,
  ``error`` (the observation), ``executions`` (0: the call was stopped).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import redis

from reactq.shared.redisconn import free_port, start_server
from reactq.shared.requests import RunRequest
from reactq.shared.settings import Settings
from tests.scripted_server import (
    Reply,
    ScriptedServer,
    count_assistant_messages,
    first_user_text,
    reply_error,
    reply_text,
    reply_tool_calls,
)

ROOT = Path(__file__).resolve().parents[2]
GIL_SECONDS = int(os.environ.get("REACTQ_FAULTS_GIL_SECONDS", "60"))
POOL = os.environ.get("REACTQ_FAULTS_POOL", "threads")  # or prefork: the faults apply to both
POISON = ["round(1, -10**8)", "round(10**999, -10**6)", "round(1, -10**8) + 1",
          "max(round(2, -99999999), 1)"]


class _Book:
    """Scripts by exact query (the conversation's first user message)."""

    def __init__(self) -> None:
        self.scripts: dict[str, list[Reply]] = {}
        self.lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> Reply:
        query = first_user_text(request)
        with self.lock:
            # Helper calls (compaction, synthesis) carry the query inside a longer prompt.
            turns = self.scripts.get(query) or next(
                (t for q, t in self.scripts.items() if q in query), None)
        if turns is None:
            return reply_error(400, {"error": {"message": "no script"}})
        if request.get("stream"):
            return reply_text("final answer")
        return turns[min(count_assistant_messages(request), len(turns) - 1)]


class _Rig:
    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="reactq-f-tools-"))
        port = free_port()
        self.redis_proc = start_server(port, self.tmp / "redis")
        self.url = f"redis://127.0.0.1:{port}/0"
        self.r = redis.Redis.from_url(self.url)
        self.book = _Book()
        self.llm = ScriptedServer(self.book, models=("scripted",)).start()
        self.workers: list[subprocess.Popen[bytes]] = []
        from reactq.dispatcher.client import Dispatcher

        self.d = Dispatcher(Settings(redis_url=self.url, model="scripted", openai_api_key="k",
                                     openai_base_url=self.llm.base_url, demo_tools=True,
                                     tools="tests.integration.tools:TOOLS"))

    def start_worker(self) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("REACTQ_", "OPENAI_"))}
        env.update(REACTQ_REDIS_URL=self.url, OPENAI_BASE_URL=self.llm.base_url,
                   OPENAI_API_KEY="k", REACTQ_MODEL="scripted", REACTQ_DEMO_TOOLS="true",
                   REACTQ_TOOLS="tests.integration.tools:TOOLS", PYTHONPATH=str(ROOT),
                   # The GIL hold must fit in the default 60 s deadline's place.
                   REACTQ_TOOL_TIMEOUT=str(GIL_SECONDS + 30))
        name = f"ft{len(self.workers)}-{uuid.uuid4().hex[:4]}"
        log = self.tmp / f"{name}.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "reactq.workers.app", "worker", "-Q",
             "reactq.runs,reactq.tools", "--pool", POOL, "-c", "2", "-n", f"{name}@%h",
             "--without-mingle", "--without-gossip", "-l", "INFO"],
            cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
        self.workers.append(proc)
        deadline = time.monotonic() + 60
        while " ready." not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.1)
        return proc

    def stop(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.workers:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.llm.stop()
        self.redis_proc.kill()
        self.redis_proc.wait()

    # -- helpers ------------------------------------------------------------------------
    def submit(self, turns: list[Reply]) -> tuple[Any, str, float]:
        query = f"f_tools {uuid.uuid4().hex}"
        with self.book.lock:
            self.book.scripts[query] = turns
        return self.d.submit(RunRequest(query=query)), query, time.monotonic()

    def records(self, key: str, tag: str) -> list[dict[str, Any]]:
        return [x for x in (json.loads(v) for v in self.r.lrange(key, 0, -1)) if x["tag"] == tag]

    def watch(self, handle: Any, submitted: float, timeout: float) -> dict[str, Any]:
        """Follow the run's events: when each call's result came, uncertain errors, status."""
        done_at: dict[str, float] = {}
        errors: dict[str, str | None] = {}
        uncertain = 0
        status = "unfinished"
        for _, e in handle.events(timeout=timeout):
            if e.channel == "step" and e.data.get("type") == "iteration" and e.data.get("status") == "done":
                done_at.setdefault(e.data["tool_call_id"], round(time.monotonic() - submitted, 2))
                errors.setdefault(e.data["tool_call_id"], e.data.get("error"))
            elif e.channel == "error" and e.data.get("kind") == "tool_uncertain":
                uncertain += 1
            elif e.channel == "done":
                status = e.data.get("status", "?")
        return {"done_at": done_at, "errors": errors, "uncertain": uncertain, "status": status}


def _gone(pid: int) -> bool:
    try:
        return "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


def _wait(predicate: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    return None


def gil_hold(rig: _Rig) -> dict[str, Any]:
    tag = uuid.uuid4().hex
    h, _, t0 = rig.submit([reply_tool_calls([("g", "hold_gil", {"tag": tag, "seconds": GIL_SECONDS})]),
                           reply_text("held")])
    w = rig.watch(h, t0, GIL_SECONDS + 120)
    return {"hold_s": GIL_SECONDS, "lease_s": Settings().lease_seconds, "pool": POOL,
            "executions": len(rig.records("reactq-test:toolruns", tag)),
            "starts": len(rig.records("reactq-test:toolstarts", tag)),
            "uncertain": w["uncertain"], "observation_s": w["done_at"].get("g"), "status": w["status"]}


def gil_kill(rig: _Rig) -> dict[str, Any]:
    tag = uuid.uuid4().hex
    h, _, t0 = rig.submit([reply_tool_calls([("k", "hold_gil_retry", {"tag": tag, "seconds": 8})]),
                           reply_text("resumed")])
    first = _wait(lambda: rig.records("reactq-test:toolstarts", tag), 30)
    if not first:
        return {"error": "the tool never started"}
    victim = first[0]["ppid"]
    os.kill(victim, signal.SIGKILL)
    killed = time.time()
    runner_died = bool(_wait(lambda: _gone(first[0]["pid"]), 10))
    second = _wait(lambda: rig.records("reactq-test:toolstarts", tag)[1:], 30)
    w = rig.watch(h, t0, 60)
    return {"resumed_after_s": round(second[0]["started"] - killed, 2) if second else None,
            "resumed_elsewhere": bool(second) and second[0]["ppid"] != victim,
            "runner_died_with_worker": runner_died,
            "executions": len(rig.records("reactq-test:toolruns", tag)), "status": w["status"]}


def poison(rig: _Rig) -> dict[str, Any]:
    calls = [(f"p{i}", "calculator", {"expression": e}) for i, e in enumerate(POISON)]
    # Tens of seconds for a quadratic sentence regex; small enough to need no context compaction.
    calls.append(("ts", "text_stats", {"text": "." * 60_000 + "x"}))
    h, _, t0 = rig.submit([reply_tool_calls(calls), reply_text("refused")])
    w = rig.watch(h, t0, 120)
    refused = sum(1 for i in range(len(POISON)) if "ndigits" in (w["errors"].get(f"p{i}") or ""))
    return {"calls": len(calls), "refused": refused,
            "observation_s": max(w["done_at"].values()) if w["done_at"] else None,
            "workers_alive": sum(1 for p in rig.workers if p.poll() is None), "status": w["status"]}


def deadline(rig: _Rig) -> dict[str, Any]:
    tag = uuid.uuid4().hex
    h, _, t0 = rig.submit([reply_tool_calls([("t", "hold_gil_2s", {"tag": tag, "seconds": 20})]),
                           reply_text("went on")])
    w = rig.watch(h, t0, 120)
    return {"timeout_s": 2, "observation_s": w["done_at"].get("t"), "error": w["errors"].get("t"),
            "executions": len(rig.records("reactq-test:toolruns", tag)), "status": w["status"]}


def run() -> dict[str, Any]:
    rig = _Rig()
    try:
        for _ in range(3):
            rig.start_worker()
        return {"gil_hold": gil_hold(rig), "gil_kill": gil_kill(rig), "poison": poison(rig),
                "deadline": deadline(rig)}
    finally:
        rig.stop()
