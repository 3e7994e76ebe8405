"""``python -m bench.approvals [N]``: N runs waiting for a person at once on a 2-worker cluster.

Each run's first LLM turn calls ``echo``, which its ``approval`` policy makes wait. Once all
N wait, it reports: the tasks the workers are running (0: a waiting run holds no slot), the
leases held, Redis memory per waiting run, ``GET /v1/approvals?limit=50`` latency (p50/p99,
through the gateway app in this process), and the time from a decision to its tool call's
start (p50/p99, over ``DECIDE`` approvals decided 20 ms apart). Writes ``bench/results/approvals-<N>.json``.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.cluster import Cluster, WorkerSpec
from bench.script import Scenario
from reactq.dispatcher.client import Dispatcher
from reactq.shared.keys import LEASE_SHARDS
from reactq.shared.requests import RunRequest

DECIDE = 200
LISTS = 200


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _submit(d: Dispatcher, n: int) -> list[str]:
    query = Scenario(turns=2, calls=1, tool="echo", tag="approvals").query()
    policy = {"tools": ["echo"], "timeout_s": 3600}
    return [d.submit(RunRequest(query=query, completion_check=False, approval=policy)).run_id for _ in range(n)]


def _wait_pending(d: Dispatcher, n: int, timeout: float) -> float:
    t0 = time.monotonic()
    while d.approvals.pending_count() < n:
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"only {d.approvals.pending_count()} of {n} runs wait after {timeout} s")
        time.sleep(0.5)
    return time.monotonic() - t0


def _busy(d: Dispatcher, c: Cluster) -> dict[str, int]:
    active = d.celery.control.inspect(timeout=2).active() or {}
    r = c.redis()
    leases = sum(int(r.hlen(d.keys.lease_tasks_of(s))) for s in range(LEASE_SHARDS))
    return {"tasks_running": sum(len(v) for v in active.values()), "leases_held": leases,
            "queued_messages": int(r.llen("reactq.runs")) + int(r.llen("reactq.tools"))}


def _list_latency(d: Dispatcher) -> list[float]:
    from fastapi.testclient import TestClient

    from reactq.dispatcher.http.app import create_app

    out = []
    with TestClient(create_app(d.settings)) as http:
        for _ in range(LISTS):
            t0 = time.perf_counter()
            assert http.get("/v1/approvals", params={"limit": 50}).status_code == 200
            out.append(time.perf_counter() - t0)
    return out


def _decision_to_start(d: Dispatcher, run_ids: list[str]) -> list[float]:
    decided: dict[str, float] = {}
    for run_id in run_ids[:DECIDE]:
        h = d.handle(run_id)
        a = h.approvals()[0]
        decided[run_id] = time.time()
        h.decide(a["approval_id"], "approve", args_digest=a["args_digest"])
        time.sleep(0.02)  # decisions as people make them, not one burst
    out = []
    for run_id, at in decided.items():
        h = d.handle(run_id)
        h.result(timeout=120)
        outcome = d.store.ledger_get(run_id, "c0_0")
        assert outcome is not None and outcome["status"] == "done"
        out.append(float(outcome["outcome"]["started_at"]) - at)
    return out


def main(n: int) -> dict[str, Any]:
    with Cluster() as c:
        c.start_workers(WorkerSpec(count=2, pool="threads", concurrency=16))
        d = Dispatcher(c.settings())
        r = c.redis()
        before = int(r.info("memory")["used_memory"])
        t0 = time.monotonic()
        run_ids = _submit(d, n)
        submitted = time.monotonic() - t0
        waited = _wait_pending(d, n, timeout=max(300.0, n / 10))
        time.sleep(2.0)  # the last tasks acknowledge and release their leases
        busy = _busy(d, c)
        per_run = (int(r.info("memory")["used_memory"]) - before) / n
        lists = _list_latency(d)
        starts = _decision_to_start(d, run_ids)
        out = {"waiting_runs": n, "submit_s": round(submitted, 1), "all_waiting_after_s": round(waited, 1),
               **busy, "redis_bytes_per_waiting_run": round(per_run),
               "approvals_list_p50_ms": round(1000 * statistics.median(lists), 2),
               "approvals_list_p99_ms": round(1000 * _pct(lists, 0.99), 2),
               "decision_to_tool_start_p50_ms": round(1000 * statistics.median(starts), 1),
               "decision_to_tool_start_p99_ms": round(1000 * _pct(starts, 0.99), 1),
               "workers": "2 × threads, concurrency 16"}
    path = Path(__file__).parent / "results" / f"approvals-{n}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000), indent=2))
