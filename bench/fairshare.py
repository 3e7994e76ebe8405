"""``python -m bench.fairshare [BATCH] [INTERACTIVE] [REPEATS] [--a-interactive] [--a-max-active=N]``: one tenant's big batch against
another tenant's interactive runs, on the same workers.

Tenant ``b`` submits ``INTERACTIVE`` (20) interactive runs one after another, as a person would:
each one is submitted, its first event (the worker's ``step thinking start``) is awaited, then
the next. Measured twice per repeat, interleaved:

* **alone**: nothing else is queued;
* **loaded**: tenant ``a`` has just submitted ``BATCH`` (2,000) runs with ``priority: batch`` at
  once (a batch whose lines all go in flight), and the workers are saturated with them.

The figure is the p95 of submit → first event, loaded ÷ alone (target ≤ 2). After each loaded
pass the queues are purged and the workers restarted (the batch would take minutes to drain).
Writes ``bench/results/fairshare.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.cluster import Cluster, WorkerSpec
from bench.runs import request
from bench.script import Scenario
from reactq.dispatcher.client import Dispatcher
from reactq.shared.errors import TooManyRequests

WORKERS = WorkerSpec(count=2, pool="threads", concurrency=8)
#: Both tenants' runs: 3 LLM turns and 2 tool calls, a 50 ms LLM (a fast hosted model).
SCENARIO = Scenario(turns=3, delay=0.05)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def first_event_ms(d: Dispatcher, tenant: str) -> float:
    """Submit one interactive run of ``tenant``; ms until its first event arrives."""
    t0 = time.perf_counter()
    h = d.submit({**request(SCENARIO), "priority": "interactive"}, run_id=f"fb{uuid.uuid4().hex}",
                 tenant=tenant)
    for _ in h.events(block_ms=1000, timeout=120):
        return (time.perf_counter() - t0) * 1000
    raise TimeoutError(f"run {h.run_id} published nothing within 120 s")


def interactive_pass(d: Dispatcher, n: int) -> list[float]:
    return [first_event_ms(d, "b") for _ in range(n)]


def flood(d: Dispatcher, n: int, priority: str = "batch") -> tuple[float, int]:
    """Tenant ``a`` submits ``n`` runs as fast as one thread can: (seconds it took, runs
    refused by its ``max_active_runs``)."""
    t0 = time.monotonic()
    refused = 0
    for _ in range(n):
        try:
            d.submit({**request(SCENARIO), "priority": priority}, run_id=f"fa{uuid.uuid4().hex}", tenant="a")
        except TooManyRequests:
            refused += 1
    return time.monotonic() - t0, refused


def finished(c: Cluster, prefix: str) -> int:
    r = c.redis()
    return sum(1 for k in r.scan_iter(match=f"reactq:run:{{{prefix}*", count=1000)
               if k.endswith(b"}") and r.hget(k, "status") == b"succeeded")


def main(batch: int = 2000, interactive: int = 20, repeats: int = 2, a_priority: str = "batch",
         a_max_active: int | None = None) -> dict[str, Any]:
    alone: list[list[float]] = []
    loaded: list[list[float]] = []
    passes: list[dict[str, Any]] = []
    with Cluster() as c:
        quota = c.tmp / "tenants.toml"
        quota.write_text(f"[tenants.a]\nmax_active_runs = {a_max_active}\n" if a_max_active else "")
        d = Dispatcher(c.settings(tenants=quota))
        c.start_workers(WORKERS)
        interactive_pass(d, 5)  # warm-up: connections, tool catalog, model clients
        for _ in range(repeats):
            alone.append(interactive_pass(d, interactive))
            time.sleep(2.0)  # the alone runs finish
            submit_s, refused = flood(d, batch, a_priority)
            time.sleep(2.0)  # every slot busy with tenant a's runs
            t0 = time.monotonic()
            loaded.append(interactive_pass(d, interactive))
            passes.append({"batch_submit_s": round(submit_s, 1), "batch_runs_refused": refused,
                           "loaded_pass_s": round(time.monotonic() - t0, 1),
                           "batch_runs_finished_meanwhile": finished(c, "fa"),
                           "load_avg_1m": round(os.getloadavg()[0], 2)})
            c.reset()
            c.start_workers(WORKERS)
            interactive_pass(d, 5)
    p95_alone = _pct([x for p in alone for x in p], 0.95)
    p95_loaded = _pct([x for p in loaded for x in p], 0.95)
    name = "fairshare" + ("" if a_priority == "batch" else f"-a-{a_priority}") + \
        (f"-a-max{a_max_active}" if a_max_active else "")
    out = {
        "id": name.replace("fairshare", "fair-share"),
        "tenant_a_max_active_runs": a_max_active,
        "what": f"tenant b's {interactive} interactive runs, submit → first event, "
                f"while tenant a's {batch:,} {a_priority} runs are queued",
        "p95_loaded_ms": round(p95_loaded, 1), "p95_alone_ms": round(p95_alone, 1),
        "ratio": round(p95_loaded / p95_alone, 2), "target": 2.0, "met": p95_loaded / p95_alone <= 2.0,
        "p50_loaded_ms": round(statistics.median([x for p in loaded for x in p]), 1),
        "p50_alone_ms": round(statistics.median([x for p in alone for x in p]), 1),
        "max_loaded_ms": round(max(x for p in loaded for x in p), 1),
        "repeats": repeats, "passes": passes,
        "samples_alone_ms": [[round(x, 1) for x in p] for p in alone],
        "samples_loaded_ms": [[round(x, 1) for x in p] for p in loaded],
        "workers": WORKERS.describe(), "scenario": SCENARIO.query(),
        "cpus": os.cpu_count(),
    }
    path = Path(__file__).parent / "results" / f"{name}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    nums = [int(a) for a in sys.argv[1:] if a.isdigit()]
    prio = "interactive" if "--a-interactive" in sys.argv else "batch"
    cap = next((int(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--a-max-active=")), None)
    print(json.dumps(main(*nums, a_priority=prio, a_max_active=cap), indent=2))
