"""``POST /v1/batches/{id}/fork``: a new batch whose lines with a matching status are forks of
their runs (``dispatcher/fork.py``) and whose other lines keep their run and result.

The new batch's id comes from the source batch and the request, and each fork's idempotency
key from the new batch and the line: the same request twice (or a retry after the gateway
died half-way) answers the same batch, and each line is forked once. The forks are created
first; the batch record (with the kept lines' results) last, and its driver re-attaches to
the forks by their keys.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from reactq.dispatcher.batch.items import BatchItem
from reactq.dispatcher.batch.store import BatchStore
from reactq.dispatcher.client import Dispatcher
from reactq.dispatcher.fork import fork_run, tool_flags
from reactq.shared.engine.fork import Plan
from reactq.shared.errors import RunNotFound
from reactq.shared.fork.models import BatchForkRequest, ForkRequest


@dataclass
class BatchFork:
    batch_id: str | None
    forked: int
    kept: int
    plans: dict[str, Plan] = field(default_factory=dict)
    created: bool = True


def fork_batch_id(source: str, req: BatchForkRequest) -> str:
    """The new batch's id: the same for the same request on the same batch."""
    body = req.model_dump_json(by_alias=True, exclude={"dry_run"})
    return hashlib.sha256(f"{source}\x00{body}".encode()).hexdigest()[:32]


def fork_batch(d: Dispatcher, batches: BatchStore, source: str, req: BatchForkRequest) -> BatchFork:
    """Fork ``source``'s lines whose status ``req.status`` names (``RunNotFound`` when it is gone)."""
    view = batches.view(source, with_results=True)
    if view is None:
        raise RunNotFound(f"no batch with id {source!r} (it may have expired)")
    new_id = fork_batch_id(source, req)
    items, concurrency, _ = batches.items(source)
    results = {int(r["line"]): r for r in view.get("results", [])}
    chosen = [it for it in items if (res := results.get(it.line)) is not None and res.get("status") in req.status
              and res.get("run_id")]
    kept = [results[it.line] for it in items if it not in chosen and it.line in results]
    if not req.dry_run and batches.exists(new_id):
        return BatchFork(new_id, len(chosen), len(kept), created=False)
    flags = tool_flags(d)
    cap = batches.cost_budget(source)
    plans: dict[str, Plan] = {}
    new_items: list[BatchItem] = []
    for it in chosen:
        res = results[it.line]
        start = req.from_ if req.from_ != "last_failure" or res.get("status") == "failed" else "last_turn"
        one = ForkRequest.model_validate({"from": start, "reuse": req.reuse, "edit": req.edit,
                                          "dry_run": req.dry_run, "idempotency_key": f"batchfork:{new_id}:{it.line}"})
        forked = fork_run(d, str(res["run_id"]), one, flags=flags, batch_id=None if req.dry_run else new_id,
                          batch_cost_budget_usd=cap, kind="batch_line")
        plans[str(it.id)] = forked.plan
        if forked.handle is not None:
            request = forked_request(d, forked.handle.run_id, one.idempotency_key)
            new_items.append(BatchItem(it.line, it.id, request=request))
    if req.dry_run:
        return BatchFork(None, len(chosen), len(kept), plans)
    kept_items = [it for it in items if it not in chosen]
    batches.create(sorted(new_items + kept_items, key=lambda i: i.line), concurrency, batches.token_budget(source),
                 tenant=view["tenant"], cost_budget_usd=cap, webhook=batches.webhook(source),
                 batch_id=new_id, forked_from=source, results=[{**r, "forked": False} for r in kept])
    return BatchFork(new_id, len(chosen), len(kept))


def forked_request(d: Dispatcher, run_id: str, key: str | None) -> Any:
    """The fork's stored request (with its idempotency key), which the batch's driver submits
    again to re-attach to the fork."""
    from reactq.shared.requests import RunRequest

    rec = d.store.load(run_id)
    return RunRequest.model_validate({**rec.request, "idempotency_key": key})
