"""The admission every run passes, in this order, and nothing else decides it:

1. **validation** — the request model, then the registries (unknown tools or model) and the
   webhook URL (``validate_run``);
2. **tenant and scope** — the caller's key may ask for what the request asks
   (``check_scope``: ``approval.on_timeout = "approve"`` needs ``approvals:write``);
3. **quota** — a place among the tenant's ``max_active_runs``, counting every active run of
   the tenant whatever made it (``take_place``);
4. **the dollar-cap rule** — work under a dollar cap may reach only priced models
   (``check_priced_models``, over every model the run may call: ``run_models``);
5. **the ``RUN_START`` guardrails** — run by the run's first step on a worker (guardrails are
   hooks, loaded where tools are: never at the gateway), over ``query`` and
   ``system_prompt``, before any LLM call;
6. **idempotency** — the run id a key names (``run_id_for``) and the record written only
   if absent (``RunStore.create``).

``reactq.shared.service.door.Door.create_run`` applies them; each function here is one step,
so an entry that needs one up front (a schedule, a DAG, a batch) calls the same one.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import ValidationError

from reactq.shared.errors import Forbidden, RequestError, TooManyRequests
from reactq.shared.requests import DagRequest, RunRequest, check_names, check_run_request
from reactq.shared.stores.bundle import Stores
from reactq.shared.stores.idempotency import idempotent_id
from reactq.shared.stores.keys import Caller
from reactq.shared.tenants import quota_of

__all__ = ["ON_TIMEOUT_APPROVE_SCOPE", "check_dag", "check_plan", "check_priced_models", "check_run_caps",
           "check_scope", "dag_models",
           "model_for_role", "prefixed", "release_place", "run_id_for", "run_models", "take_place",
           "validate_run"]

#: The scope a request needs to let an expired approval run its call.
ON_TIMEOUT_APPROVE_SCOPE = "approvals:write"


def validate_run(stores: Stores, request: RunRequest | dict[str, Any]) -> RunRequest:
    """Step 1: the request model, the registries and the webhook; ``RequestError`` (or
    pydantic's ``ValidationError``) naming the field."""
    from reactq.shared.service.webhooks import check_webhook

    req = request if isinstance(request, RunRequest) else RunRequest.model_validate(request)
    tools, models = stores.catalog()
    check_run_request(req, tools=tools + stores.own_tools(req.tools, tools), models=models)
    check_webhook(req.webhook, stores.settings)
    return req


def check_scope(req: RunRequest, caller: Caller | None) -> None:
    """Step 2: what the request asks beyond creating a run needs its own scope (``Forbidden``,
    HTTP 403 naming it). ``caller`` None: an in-cluster entry (``Dispatcher``, the CLI, a
    schedule's tick or a DAG's step, whose owner's key was checked when it was made)."""
    if caller is None:
        return
    if req.approval is not None and req.approval.on_timeout == "approve" \
            and not caller.may(ON_TIMEOUT_APPROVE_SCOPE):
        raise Forbidden(ON_TIMEOUT_APPROVE_SCOPE, field="approval.on_timeout")


def run_id_for(req: RunRequest, tenant: str, run_id: str | None = None) -> str:
    """The run's id: the one given, else the one its idempotency key names for ``tenant``
    (a retry after a kill finds what it wrote), else a new one."""
    if run_id is not None:
        return run_id
    if req.idempotency_key is not None:
        return idempotent_id(req.idempotency_key, tenant=tenant)
    return uuid.uuid4().hex


def take_place(stores: Stores, tenant: str, run_id: str) -> None:
    """Step 3: a place among the tenant's ``max_active_runs`` for ``run_id`` (a place it holds
    already counts); ``TooManyRequests`` (HTTP 429 with ``Retry-After``) when every place is
    taken. Every run of the tenant holds one, whatever made it."""
    limit = quota_of(stores.settings, tenant).max_active_runs
    if limit is not None and not stores.active.admit(tenant, run_id, limit):
        raise TooManyRequests(f"tenant {tenant} has {limit} active runs (its max_active_runs); "
                              "retry when one has ended", field="max_active_runs")


def release_place(stores: Stores, tenant: str, run_id: str) -> None:
    """Give back a place taken for a run that was then refused (nothing was stored)."""
    if quota_of(stores.settings, tenant).max_active_runs is not None:
        stores.active.release(tenant, run_id)


# -- the dollar-cap rule -------------------------------------------------------------------
def model_for_role(specs: list[dict[str, Any]], role: str | None) -> str | None:
    """The first model with ``role`` (None: ``general``), else the default (the first
    ``general`` model, else the first): what the workers' registry resolves a role to."""
    wanted = role or "general"
    for roles in (wanted, "general"):
        name = next((str(s["name"]) for s in specs if roles in (s.get("roles") or [])), None)
        if name is not None:
            return name
    return str(specs[0]["name"]) if specs else None


def run_models(model: str | None, specs: list[dict[str, Any]]) -> list[str]:
    """Every model a run of ``model`` (None: the default) may call: its own, and the ``fast``
    role's (tool selection, compaction)."""
    own = model or model_for_role(specs, None)
    fast = next((s["name"] for s in specs if "fast" in (s.get("roles") or [])), None) or own
    return list(dict.fromkeys(n for n in (own, fast) if n is not None))


def dag_models(req: DagRequest, specs: list[dict[str, Any]]) -> list[str]:
    """Every model a DAG may call: its own (planner, analyzer, synthesis; None: the ``smart``
    role's), each step's ``model_hint`` role (a planner's steps may name any role) and what
    each step's run may call."""
    names = [req.model or model_for_role(specs, "smart")]
    hints = ({s.model_hint for s in req.steps} if req.steps is not None
             else {None, "fast", "reasoning"})
    for hint in sorted(hints, key=lambda h: h or ""):
        names += run_models(model_for_role(specs, hint), specs)
    return list(dict.fromkeys(n for n in names if n is not None))


def check_priced_models(field: str, models: list[str], specs: list[dict[str, Any]], why: str) -> None:
    """Step 4: under a dollar cap (``why`` names it) every model the work may call has a price:
    a cap that silently covers only part of the spend is refused (``RequestError`` naming
    the model)."""
    priced = {s["name"] for s in specs if s.get("price")}
    unpriced = [n for n in models if n not in priced]
    if unpriced:
        raise RequestError(f"{field}: model {unpriced[0]!r} has no price in the model registry "
                           f"(price = {{input_per_mtok, output_per_mtok}}), so {why} cannot be "
                           "enforced", field=field)


def cap_reason(stores: Stores, tenant: str, *, run_cap: float | None = None,
               batch_cap: float | None = None) -> str | None:
    """Which dollar cap the work is under (None: none): its own, its batch's, its tenant's."""
    if run_cap is not None:
        return "its cost_budget_usd"
    if batch_cap is not None:
        return "the batch's cost_budget_usd"
    if quota_of(stores.settings, tenant).cost_per_day_usd is not None:
        return f"tenant {tenant}'s cost_per_day_usd"
    return None


def check_run_caps(stores: Stores, req: RunRequest, tenant: str, *, batch_cap: float | None = None,
                   field: str = "model") -> None:
    """The dollar-cap rule for one run."""
    why = cap_reason(stores, tenant, run_cap=req.cost_budget_usd, batch_cap=batch_cap)
    if why is not None:
        specs = stores.model_specs()
        check_priced_models("cost_budget_usd" if req.cost_budget_usd is not None else field,
                            run_models(req.model, specs), specs, why)


def check_dag(stores: Stores, req: DagRequest, tenant: str) -> None:
    """A DAG's registry checks and the dollar-cap rule over every model it may call."""
    from reactq.shared.service.webhooks import check_webhook

    tools, models = stores.catalog()
    check_names("tools", req.tools, tools, "tool names")
    if req.model is not None:
        check_names("model", [req.model], models, "model")
    check_webhook(req.webhook, stores.settings)
    why = cap_reason(stores, tenant)
    if why is not None:
        specs = stores.model_specs()
        check_priced_models("model", dag_models(req, specs), specs, why)


def check_plan(request: DagRequest, *, max_steps: int) -> None:
    """The registry-free checks of a user plan (ids, size, cycles); ``RequestError``."""
    from reactq.shared.dag.models import PlanError, PlanStep, PlanTooLargeError, check_unique_ids, validate_steps

    if request.steps is None:
        return
    steps = [PlanStep(**s.model_dump()) for s in request.steps]
    try:
        if len(steps) > max_steps:
            raise PlanTooLargeError(len(steps), max_steps)
        check_unique_ids(steps)
        validate_steps(steps)  # dangling dependencies are pruned later, with a warning event
    except PlanError as exc:
        raise RequestError(str(exc), field="steps") from exc


def prefixed(prefix: str, exc: RequestError | ValidationError) -> RequestError:
    """A refusal of a request inside another one (a schedule's ``run``), its field under
    ``prefix``."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return RequestError(f"{prefix}.{where}: {first['msg']}" if where else f"{prefix}: {first['msg']}",
                            field=f"{prefix}.{where}" if where else prefix)
    field = f"{prefix}.{exc.field}" if exc.field else prefix
    if isinstance(exc, Forbidden):
        return Forbidden(exc.scope, field=field)
    return type(exc)(str(exc), field=field) if type(exc) in (RequestError, TooManyRequests) \
        else RequestError(str(exc), field=field)
