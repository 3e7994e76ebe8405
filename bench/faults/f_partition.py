"""Workers on two network hosts; one host is partitioned mid-tool (its link dropped, its processes
left running), then healed.

Redis (state and broker), the gateway and two worker hosts each live in a network namespace of
their own (``netns.py``), talking only over veth links to one bridge. Figures:

* ``fanout_workers``: worker processes (one per host) that ran tool calls of one run (2 = both);
* ``resume_s``: from the partition to the cut-off host's calls starting again on the other host
  (bound: lease + 5 s);
* ``ledger_duplicates``: tool calls whose ledger result is not the surviving host's (0);
* ``late_writes_refused``: the cut-off worker's results, written after the heal, that the
  ledger refused because the call was done elsewhere (CAS);
* ``duplicate_tool_events``: extra ``iteration done`` events of one call in the run's stream (0);
* ``rejoined_s``: from the heal to the healed host running a tool call of a new run again.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx2
import redis

from bench.faults.netns import Topology, netns_missing
from tests.scripted_server import ScriptedServer, count_assistant_messages, first_user_text, reply_error, reply_text, reply_tool_calls

ROOT = Path(__file__).resolve().parents[2]
LEASE_S = 2.0
HOSTS = ["redis", "gw", "w1", "w2"]


class Book:
    def __init__(self) -> None:
        self.scripts: dict[str, list[Any]] = {}
        self.lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> Any:
        query = first_user_text(request)
        with self.lock:
            turns = self.scripts.get(query) or next(
                (v for k, v in self.scripts.items() if k in query), None)
        if turns is None:
            return reply_error(400, {"error": {"message": "no script"}})
        if request.get("stream"):
            return reply_text("final answer")
        return turns[min(count_assistant_messages(request), len(turns) - 1)]


def _wait(pred: Any, timeout: float, what: str, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


class Partition:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.topo = Topology(HOSTS)
        self.book = Book()
        self.llm: ScriptedServer | None = None
        self.workers: dict[str, Any] = {}

    # -- set-up --------------------------------------------------------------------------
    def start(self) -> None:
        t = self.topo.build()
        self.redis_url = f"redis://{t.ip('redis')}:6379/0"
        t.spawn("redis", ["redis-server", "--bind", t.ip("redis"), "--port", "6379", "--save", "",
                          "--appendonly", "no", "--protected-mode", "no"], dict(os.environ),
                self.tmp / "redis.log", cwd=self.tmp)
        self.llm = ScriptedServer(self.book, host=t.root_ip).start()
        self.r = redis.Redis.from_url(self.redis_url, socket_timeout=5)
        _wait(lambda: self._ping(), 15, "redis in its namespace")
        env = self._env()
        for host in ("w1", "w2"):
            self.workers[host] = t.spawn(host, [
                sys.executable, "-m", "celery", "-A", "reactq.workers.app", "worker", "--pool", "threads",
                "-c", "4", "-n", f"{host}@%h", "-Q", "reactq.runs,reactq.tools", "--without-mingle",
                "--without-gossip", "-l", "INFO"], env, self.tmp / f"{host}.log", cwd=ROOT)
        t.spawn("gw", [sys.executable, "-m", "uvicorn", "reactq.dispatcher.http:app", "--host", t.ip("gw"),
                       "--port", "8080", "--log-level", "warning"], env, self.tmp / "gw.log", cwd=ROOT)
        self.api = httpx2.Client(base_url=f"http://{t.ip('gw')}:8080", timeout=10)
        for host in ("w1", "w2"):
            _wait(lambda h=host: " ready." in (self.tmp / f"{h}.log").read_text(errors="replace"), 60, f"{host} ready")
        _wait(lambda: self._gw_up(), 30, "the gateway")
        self.pids = {host: p.pid for host, p in self.workers.items()}

    def _ping(self) -> bool:
        try:
            return bool(self.r.ping())
        except redis.RedisError:
            return False

    def _gw_up(self) -> bool:
        try:
            return self.api.get("/healthz").status_code in (200, 503)
        except httpx2.TransportError:
            return False

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("REACTQ_", "OPENAI_"))}
        assert self.llm is not None
        env.update(REACTQ_REDIS_URL=self.redis_url, OPENAI_BASE_URL=self.llm.base_url, OPENAI_API_KEY="k",
                   REACTQ_MODEL="scripted", REACTQ_TOOLS="tests.integration.tools:TOOLS",
                   REACTQ_LEASE_SECONDS=str(LEASE_S), PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        return env

    # -- runs ----------------------------------------------------------------------------
    def submit(self, name: str, calls: int, seconds: float) -> tuple[str, list[str]]:
        query = f"partition {name} {uuid.uuid4().hex[:6]}"
        tags = [f"{name}-{uuid.uuid4().hex[:6]}-{n}" for n in range(calls)]
        with self.book.lock:
            self.book.scripts[query] = [
                reply_tool_calls([(f"c{n}", "slow", {"tag": tag, "seconds": seconds}) for n, tag in enumerate(tags)]),
                reply_text(f"{name} done")]
        res = self.api.post("/v1/runs", json={"query": query})
        res.raise_for_status()
        return res.json()["run_id"], tags

    def wait_run(self, run_id: str, timeout: float = 90) -> dict[str, Any]:
        def ended() -> dict[str, Any] | None:
            body = self.api.get(f"/v1/runs/{run_id}").json()
            return body if body.get("status") in ("succeeded", "failed", "cancelled") else None
        return _wait(ended, timeout, f"run {run_id}", every=0.2)

    def toolruns(self, tags: list[str]) -> list[dict[str, Any]]:
        rows = [json.loads(x) for x in self.r.lrange("reactq-test:toolruns", 0, -1)]
        return [x for x in rows if x["tag"] in tags]

    def holders(self, run_id: str, n: int) -> dict[str, int]:
        """call id → pid of the worker holding its lease (dead or alive)."""
        from reactq.shared.keys import Keys

        k, out = Keys(), {}
        for i in range(n):
            member = f"tool:{run_id}:c{i}"
            raw = self.r.hget(k.lease_tasks_for(member), member)
            if raw:
                out[f"c{i}"] = int(json.loads(raw)["worker"].rsplit(":", 1)[1])
        return out

    def ledger(self, run_id: str) -> dict[str, dict[str, Any]]:
        from reactq.shared.keys import Keys

        return {k.decode(): json.loads(v) for k, v in self.r.hgetall(Keys().run_tools(run_id)).items()}

    def duplicate_events(self, run_id: str) -> int:
        """Extra ``iteration done`` events for one tool call (0: each call reported once)."""
        from collections import Counter

        from reactq.shared.keys import Keys

        seen: Counter[str] = Counter()
        for _, f in self.r.xrange(Keys().run_events(run_id)):
            data = json.loads(f[b"data"])
            if data.get("type") == "iteration" and data.get("status") == "done":
                seen[data["tool_call_id"]] += 1
        return sum(n - 1 for n in seen.values())

    # -- the scenario --------------------------------------------------------------------
    def scenario(self) -> dict[str, Any]:
        t = self.topo
        fig: dict[str, Any] = {"lease_s": LEASE_S}
        # 1. A run fans its tools out to both hosts.
        rid, tags = self.submit("fanout", 8, 1.0)
        assert self.wait_run(rid)["status"] == "succeeded"
        fig["fanout_workers"] = len({x["pid"] for x in self.toolruns(tags)})
        # 2. Mid-tool, the host of w1 drops off the network.
        rid, tags = self.submit("cut", 8, 4.0)
        held = _wait(lambda: (lambda h: h if self.pids["w1"] in h.values() and len(h) == 8 else None)(
            self.holders(rid, 8)), 30, "calls held by both hosts")
        cut_calls = sorted(c for c, pid in held.items() if pid == self.pids["w1"])
        t.partition("w1")
        cut_at = time.time()
        res = self.wait_run(rid)
        fig["run_status"] = res["status"]
        ledger = self.ledger(rid)
        cut_tags = {tags[int(c[1:])] for c in cut_calls}
        survivors = [x for x in self.toolruns(list(cut_tags)) if x["pid"] == self.pids["w2"]]
        fig["calls_cut_off"] = len(cut_calls)
        fig["resume_s"] = round(max(x["started"] for x in survivors) - cut_at, 2) if survivors else None
        w2_name = f":{self.pids['w2']}"
        fig["ledger_duplicates"] = sum(1 for c in cut_calls
                                       if not ledger[c]["outcome"]["worker"].endswith(w2_name))
        fig["duplicate_tool_events"] = self.duplicate_events(rid)
        # 3. Heal. It rejoins without operator action: a new run's calls reach it again.
        t.heal("w1")
        healed_at = time.time()
        rejoined = None
        deadline = time.monotonic() + 90
        while rejoined is None and time.monotonic() < deadline:
            rid3, tags3 = self.submit("rejoin", 8, 0.5)
            assert self.wait_run(rid3)["status"] == "succeeded"
            mine = [x for x in self.toolruns(tags3) if x["pid"] == self.pids["w1"]]
            rejoined = round(min(x["started"] for x in mine) - healed_at, 2) if mine else None
        # 4. The stale worker's late results were refused; the ledger kept w2's.
        log = self.tmp / "w1.log"
        try:
            _wait(lambda: log.read_text(errors="replace").count("already done elsewhere") >= len(cut_calls),
                  30, "the stale worker's late writes")
        except TimeoutError:
            pass
        fig["late_writes_refused"] = log.read_text(errors="replace").count("already done elsewhere")
        after = self.ledger(rid)
        fig["ledger_duplicates"] += sum(1 for c in cut_calls
                                        if not after[c]["outcome"]["worker"].endswith(w2_name))
        fig["rejoined_s"] = rejoined
        return fig

    def close(self) -> None:
        if self.llm is not None:
            self.llm.stop()
        self.topo.close()


def run() -> dict[str, Any]:
    missing = netns_missing()
    if missing:
        return {"skipped": missing}
    keep = os.environ.get("REACTQ_FAULTS_KEEP")  # a directory to keep the logs in
    with tempfile.TemporaryDirectory(prefix="reactq-partition-") as tmp:
        p = Partition(Path(keep or tmp))
        try:
            p.start()
            return p.scenario()
        finally:
            p.close()
