"""P11: a batch hit by an outage at its third turn, re-run by a bulk fork against resubmitting it.

``python -m bench P11`` (or ``python -m bench.fork --lines 1000``). Every line of a batch calls
the non-idempotent ``charge`` tool at turns 1, 2 and 3; while the scenario's outage is on, turn
3's LLM call is refused (HTTP 400), so every line ends ``failed`` after two paid turns and two charges.
The outage ends, and the same failed lines are re-run twice, one way each:

* **bulk fork** (``POST /v1/batches/{id}/fork``, here ``fork_batch`` straight in Redis): each
  line is a fork of its run from its last failure — the history of turns 1 and 2 (and their
  tool results) is carried over, and only turns 3 and 4 plus the answer are asked for;
* **resubmission**: a new batch of the same lines, every run from scratch.

Both batches are driven in this process as a gateway drives them. Counted per re-run: LLM calls
and tokens (the runs' reported usage), tool executions (``charge`` counts each in Redis),
wall time from the request to the last line's result, and dollars at a nominal price
(``PRICE``: the scripted model has none).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench.cluster import Cluster, WorkerSpec
from bench.report import Figure
from bench.script import Scenario, outage_path
from reactq.dispatcher.batch.fork import fork_batch
from reactq.dispatcher.batch.items import BatchItem
from reactq.dispatcher.batch.store import BatchStore, drive_stored_batch, holder_name
from reactq.dispatcher.client import Dispatcher
from reactq.shared.fork.models import BatchForkRequest
from reactq.shared.requests import RunRequest

#: USD per million tokens (input, output): a nominal price for the dollar figure.
PRICE = (2.50, 10.00)
SPEC = WorkerSpec(count=2, pool="threads", concurrency=16)


def _drive(d: Dispatcher, store: BatchStore, batch_id: str) -> float:
    """Drive the batch to its end here; seconds it took."""
    started = time.monotonic()
    holder = holder_name()
    store.claim(batch_id, holder)
    drive_stored_batch(d, store, batch_id, holder, threading.Event())
    return time.monotonic() - started


def _charges(cl: Cluster, tag: str) -> int:
    r = cl.redis()
    return sum(int(r.get(k) or 0) for k in r.scan_iter(match=f"bench:tally:{tag}.*", count=1000))


def _spent(results: list[dict[str, Any]]) -> dict[str, float]:
    usage = [res.get("usage") or {} for res in results]
    prompt = sum(int(u.get("prompt_tokens") or 0) for u in usage)
    completion = sum(int(u.get("completion_tokens") or 0) for u in usage)
    return {"llm_calls": sum(int(u.get("llm_calls") or 0) for u in usage), "prompt_tokens": prompt,
            "completion_tokens": completion,
            "usd": (prompt * PRICE[0] + completion * PRICE[1]) / 1e6}


def _rerun(cl: Cluster, d: Dispatcher, store: BatchStore, tag: str, how: Any) -> dict[str, Any]:
    before = _charges(cl, tag)
    started = time.monotonic()
    batch_id = how()
    _drive(d, store, batch_id)
    wall = time.monotonic() - started
    view = store.view(batch_id, with_results=True) or {}
    results = [res for res in view.get("results", []) if res.get("forked") is not False]
    return {"batch_id": batch_id, "wall_s": wall, "tool_executions": _charges(cl, tag) - before,
            "succeeded": sum(1 for res in results if res.get("status") == "succeeded"),
            "lines": len(results), **_spent(results)}


def p11(cl: Cluster, d: Dispatcher, lines: int, concurrency: int = 32) -> list[Figure]:
    tag = uuid.uuid4().hex[:8]
    sc = Scenario(turns=4, calls=1, tool="charge", fail_at=3, tag=tag)
    store = BatchStore(d.redis, d.keys, d.settings.run_ttl_seconds)
    items = [BatchItem(n, n, request=RunRequest(query=sc.query(), completion_check=False, priority="batch"))
             for n in range(1, lines + 1)]
    outage = Path(outage_path(tag))
    outage.touch()
    try:
        source = store.create(items, concurrency)
        first_wall = _drive(d, store, source)
    finally:
        outage.unlink()
    first = store.view(source, with_results=True) or {}
    failed = sum(1 for res in first.get("results", []) if res.get("status") == "failed")
    first_spent = _spent(first.get("results", []))
    fork = _rerun(cl, d, store, tag, lambda: fork_batch(d, store, source, BatchForkRequest()).batch_id)
    resubmit = _rerun(cl, d, store, tag, lambda: store.create(items, concurrency))
    details = {"lines": lines, "failed_first": failed, "first_wall_s": first_wall, "first": first_spent,
               "fork": fork, "resubmit": resubmit, "concurrency": concurrency, "workers": SPEC.describe(),
               "price_usd_per_mtok": {"input": PRICE[0], "output": PRICE[1]},
               "scenario": "4 turns: charge (not idempotent) at turns 1, 2 and 3; turn 3 refused (HTTP 400) during the outage"}
    what = f"re-running {lines:,} lines failed at turn 3: bulk fork vs resubmission"
    return [
        Figure("P11-llm", f"{what}, LLM calls", fork["llm_calls"], "calls", floor=resubmit["llm_calls"],
               rule="info", details=details),
        Figure("P11-tools", f"{what}, tool executions", fork["tool_executions"], "executions",
               floor=resubmit["tool_executions"], rule="info"),
        Figure("P11-wall", f"{what}, wall time", fork["wall_s"], "s", floor=resubmit["wall_s"], rule="info"),
        Figure("P11-usd", f"{what}, dollars at a nominal price", fork["usd"], "USD", floor=resubmit["usd"],
               rule="info"),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fork", description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args(argv)
    with Cluster() as cl:
        cl.start_workers(SPEC)
        for fig in p11(cl, Dispatcher(cl.settings()), args.lines, args.concurrency):
            print(json.dumps(fig.as_json(), default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
