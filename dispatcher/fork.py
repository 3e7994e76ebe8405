"""Forks from the dispatcher's side: one run (``fork_run``), and the one call that creates a
fork's run (``create_fork_run``), which the batch and DAG forks use too.

A fork is prepared in shared code (``reactq.shared.fork.prepare``: turn, plan, the parent's
history) and created through the same admission path as ``POST /v1/runs``: the request model's
validation, the tenant's quota and caps, idempotency. Its tenant is its parent's.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from reactq.dispatcher.client import Dispatcher, RunHandle
from reactq.shared.engine.fork import Plan
from reactq.shared.fork.models import ForkRequest
from reactq.shared.fork.prepare import PreparedFork, prepare
from reactq.shared.observe.metrics_schema import label_field
from reactq.shared.stores.idempotency import idempotent_id


@dataclass
class Forked:
    """A fork made (``handle``), or its plan alone (a dry run: ``handle`` None)."""

    plan: Plan
    forked_from: dict[str, Any]
    handle: RunHandle | None = None


def tool_flags(d: Dispatcher) -> dict[str, bool]:
    """Each tool's ``idempotent`` flag, from the workers' catalog (before any worker started:
    this process's registry)."""
    raw = d.redis.hget(d.keys.catalog, "tools")
    if raw:
        return {t["name"]: bool(t.get("idempotent", True)) for t in json.loads(raw)}
    from reactq.shared.tools.loader import default_registry

    return {t.name: t.idempotent for t in default_registry(d.settings)}


def fork_id(d: Dispatcher, tenant: str, key: str | None) -> str:
    """The fork's id: the one its idempotency key names, else a new one."""
    return uuid.uuid4().hex if key is None else idempotent_id(key, tenant=tenant)


def fork_run(d: Dispatcher, parent_id: str, req: ForkRequest, *, flags: dict[str, bool] | None = None,
             batch_id: str | None = None, batch_cost_budget_usd: float | None = None,
             kind: str = "run") -> Forked:
    """Fork ``parent_id`` as ``req`` says (``RunNotFound``, ``ForkConflict``, ``RequestError``)."""
    tenant = d.store.load(parent_id).tenant
    prepared = prepare(d.store, parent_id, run_id=fork_id(d, tenant, req.idempotency_key), start=req.from_,
                       reuse=req.reuse, edit=req.edit, idempotent=flags if flags is not None else tool_flags(d),
                       idempotency_key=req.idempotency_key, webhook=req.webhook)
    if req.dry_run:
        return Forked(prepared.plan, prepared.forked_from)
    handle = create_fork_run(d, prepared, batch_id=batch_id, batch_cost_budget_usd=batch_cost_budget_usd)
    if handle.created:
        d.redis.hincrby(d.keys.metrics("forks"), label_field([kind]), 1)
    return Forked(prepared.plan, prepared.forked_from, handle)


def create_fork_run(d: Dispatcher, prepared: PreparedFork, *, batch_id: str | None = None,
                    batch_cost_budget_usd: float | None = None) -> RunHandle:
    """THE call that creates a fork's run: the admission path every new run takes
    (``Dispatcher.submit``, as ``POST /v1/runs``: validation, the tenant's quota and caps,
    idempotency), in its parent's tenant. ``batch_id``: the batch the fork is a line of."""
    return d.submit(prepared.request, run_id=prepared.seed.run_id, tenant=prepared.parent.tenant,
                    batch_id=batch_id, batch_cost_budget_usd=batch_cost_budget_usd,
                    seed=prepared.seed, forked_from=prepared.forked_from)
