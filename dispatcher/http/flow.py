"""Flow-control routes of the HTTP gateway (a FastAPI ``router`` included by the gateway).

* ``POST /v1/batches/{id}/cancel`` → 202 ``{batch_id, status: "cancelling"}``: the batch's
  driver cancels its runs in flight and ends the lines not started ``skipped``; the batch
  ends ``cancelled``. 404 for an unknown batch; 409 once it has ended.
* ``GET /v1/flow/models`` → ``{models: [{name, rpm, tpm, max_concurrency, use: {…}}]}``: each
  model's limits (from the catalog the workers published) and its current use (last 60 s,
  in flight, waiting, paused). Deprecated: ``GET /v1/models?use=true`` answers the same
  figures beside the rest of each model's entry (one models route).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import redis
from fastapi import APIRouter, Request

from reactq.dispatcher.batch.store import BatchStore
from reactq.dispatcher.http.auth import BatchWrite
from reactq.dispatcher.http.errors import conflict, not_found, responses
from reactq.shared.api.dags import BatchCancelling
from reactq.shared.api.ops import FlowModels
from reactq.shared.stores.flow import FlowLimiter
from reactq.shared.keys import Keys
from reactq.shared.redisconn import redis_url
from reactq.shared.settings import Settings

router = APIRouter()


def _parts(request: Request) -> tuple[redis.Redis, Keys, int]:
    gw = getattr(request.app.state, "gateway", None)
    if gw is not None:
        return gw.dispatcher.redis, gw.dispatcher.keys, gw.settings.run_ttl_seconds
    s = Settings()
    return redis.Redis.from_url(redis_url(s)), Keys(s.key_prefix), s.run_ttl_seconds


@router.post("/v1/batches/{batch_id}/cancel", status_code=202, tags=["batches"], response_model=BatchCancelling,
             responses=responses(404, 409))
async def cancel_batch(batch_id: BatchWrite, request: Request) -> Any:
    """Cancel every run of the batch and skip the lines not started; 409 once it ended."""
    r, keys, ttl = _parts(request)
    store = BatchStore(r, keys, ttl)
    status = cast(bytes | None, await asyncio.to_thread(r.hget, keys.batch(batch_id), "status"))
    if status is None:
        return not_found(f"no batch with id {batch_id!r} (it may have expired)")
    if status != b"running":
        return conflict(f"batch {batch_id} has already ended ({status.decode()})", status=status.decode())
    await asyncio.to_thread(store.request_cancel, batch_id)
    return BatchCancelling(batch_id=batch_id)


def model_limits_and_use(r: redis.Redis, keys: Keys) -> list[dict[str, Any]]:
    """Each published model's limits and current use (``reactq models`` shows the same)."""
    raw = r.hget(keys.catalog, "models")
    specs = json.loads(raw) if raw else []
    limiter = FlowLimiter(r, keys)
    return [{"name": m["name"], "rpm": m.get("rpm"), "tpm": m.get("tpm"),
             "max_concurrency": m.get("max_concurrency"), "use": limiter.usage(m["name"])}
            for m in specs]


@router.get("/v1/flow/models", tags=["flow"], response_model=FlowModels, deprecated=True)
async def flow_models(request: Request) -> Any:
    """Each model's limits and current use; the same as ``GET /v1/models?use=true``."""
    r, keys, _ = _parts(request)
    return {"models": await asyncio.to_thread(model_limits_and_use, r, keys)}


async def usage_by_name(request: Request, names: list[str]) -> dict[str, dict[str, Any]]:
    """Current use of each of ``names`` under flow control (``GET /v1/models?use=true``)."""
    r, keys, _ = _parts(request)
    limiter = FlowLimiter(r, keys)
    return await asyncio.to_thread(lambda: {n: limiter.usage(n) for n in names})
