"""Flow-control faults: a worker killed while runs wait for capacity, against a
provider that enforces its limits.

30 two-turn runs under ``rpm = 240`` (the provider allows 300, counted over 3 s) on two
workers; 3 s in, one worker is killed (``kill -9``) while most runs wait on countdowns it
holds. Figures: runs succeeded, provider 429s, makespan, how long after the kill the last
run ended. Bounded (≈ 30–60 s); starts and stops its own Redis, server and workers.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from typing import Any

from bench.cluster import Cluster, WorkerSpec
from bench.p7 import _registry, handler
from bench.script import Scenario
from reactq.dispatcher.client import Dispatcher
from reactq.shared.requests import RunRequest
from tests.scripted_server import ScriptedServer

RUNS = 30


def run() -> dict[str, Any]:
    server = ScriptedServer(handler, rpm=300, window_s=3).start()
    try:
        with Cluster() as cl:
            models = _registry(cl.tmp / f"models-{uuid.uuid4().hex[:6]}.toml", server.base_url, {"rpm": 240})
            cl.start_workers(WorkerSpec(2, "threads", 4, env={"REACTQ_MODELS": str(models),
                                                              "REACTQ_LEASE_SECONDS": "1.0"}))
            d = Dispatcher(cl.settings(models=models))
            t0 = time.time()
            ids = [d.submit(RunRequest(query=Scenario(turns=2).query())).run_id for _ in range(RUNS)]
            time.sleep(3.0)
            victim = cl.workers[0]
            os.killpg(victim.proc.pid, signal.SIGKILL)
            victim.proc.wait()
            killed = time.time()
            statuses = _wait(d, ids, time.time() + 90)
            ended = time.time()
    finally:
        server.stop()
    return {"runs": RUNS, "succeeded": statuses.count("succeeded"),
            "provider_429": len(server.rate_limited), "makespan_s": round(ended - t0, 1),
            "killed_at_s": round(killed - t0, 1), "last_end_after_kill_s": round(ended - killed, 1)}


def _wait(d: Dispatcher, ids: list[str], deadline: float) -> list[str]:
    while True:
        pipe = d.redis.pipeline(transaction=False)
        for rid in ids:
            pipe.hget(d.keys.run(rid), "status")
        statuses = [(s or b"").decode() for s in pipe.execute()]
        if all(s in ("succeeded", "failed", "cancelled") for s in statuses) or time.time() > deadline:
            return statuses
        time.sleep(0.2)
