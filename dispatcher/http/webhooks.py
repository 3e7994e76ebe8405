"""Webhook delivery logs: ``GET /v1/runs/{id}/webhooks``, ``/v1/dags/{id}/webhooks``,
``/v1/batches/{id}/webhooks`` → ``{deliveries: [{webhook_id, type, status, attempts,
last_status_code, next_attempt_at, last_error, tenant}]}`` oldest first; 404 for an unknown
owner or another tenant's (scope ``runs:read``, like the owner's own route). A delivery is
its owner's tenant's: a key of another tenant never lists it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from reactq.dispatcher.http.errors import not_found, responses
from reactq.dispatcher.http.auth import BatchRead, DagRead, RunRead, caller_of
from reactq.dispatcher.http.gateway import Gateway, GatewayDep
from reactq.shared.api.webhooks import Deliveries, Delivery
from reactq.shared.stores.webhooks import WebhookStore

router = APIRouter(tags=["webhooks"])


def _list(request: Request, gw: Gateway, kind: str, owner_id: str) -> Any:
    store = WebhookStore(gw.dispatcher.redis, gw.keys, ttl_seconds=gw.settings.run_ttl_seconds)
    if not store.owner_exists(kind, owner_id):
        return not_found(f"no {kind} with id {owner_id!r} (it may have expired)")
    caller = caller_of(request)
    listed = store.list_for(kind, owner_id, None if caller.admin else caller.tenant)
    return Deliveries(deliveries=[Delivery.model_validate(d) for d in listed])


@router.get("/v1/runs/{run_id}/webhooks", response_model=Deliveries, responses=responses(404))
def run_webhooks(run_id: RunRead, request: Request, gw: GatewayDep) -> Any:
    """The run's webhook messages (``run.done``, ``approval.requested``) and their delivery."""
    return _list(request, gw, "run", run_id)


@router.get("/v1/dags/{dag_id}/webhooks", response_model=Deliveries, responses=responses(404))
def dag_webhooks(dag_id: DagRead, request: Request, gw: GatewayDep) -> Any:
    """The DAG's ``dag.done`` message and its delivery."""
    return _list(request, gw, "dag", dag_id)


@router.get("/v1/batches/{batch_id}/webhooks", response_model=Deliveries, responses=responses(404))
def batch_webhooks(batch_id: BatchRead, request: Request, gw: GatewayDep) -> Any:
    """The batch's ``batch.done`` message and its delivery."""
    return _list(request, gw, "batch", batch_id)
