"""Operations routes: ``/healthz`` (liveness), ``/readyz`` (readiness), ``/metrics``.

* ``/healthz`` — is this process alive: answers from the event loop alone, touches neither
  Redis nor a thread pool, so it stays fast under a thousand watchers and running batches,
  and a Redis outage never gets the pod restarted.
* ``/readyz`` — can this gateway serve: Redis answers and the broker answers. 503 otherwise
  (the load balancer stops sending traffic; nothing is restarted). The workers that answered
  a short ping are reported, but none answering does not fail it: the gateway still serves
  reads of stored runs and queues new ones while the workers restart (or are all busy).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis
from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from reactq.dispatcher.http.auth import need
from reactq.dispatcher.http.gateway import Gateway, GatewayDep
from reactq.shared.api.errors import error_body
from reactq.shared.api.ops import Health, NotReady, Readiness
from reactq.shared.redisconn import broker_ssl, broker_url, redis_url
from reactq.shared.settings import Settings

router = APIRouter(tags=["ops"])
_STARTED = time.monotonic()


@router.get("/healthz", response_model=Health)
async def healthz() -> Any:
    """Liveness: the process and its event loop answer. No Redis, no thread pool."""
    return {"status": "ok", "uptime_s": round(time.monotonic() - _STARTED, 1)}


@router.get("/readyz", response_model=Readiness, responses={503: {
    "model": NotReady, "description": "Redis or the broker cannot be reached (`status: unavailable`)"}})
async def readyz(gw: GatewayDep) -> Any:
    """Readiness: Redis and the broker answer (503 otherwise); the workers seen are reported."""
    return await _readiness(gw)


async def _readiness(gw: Gateway) -> JSONResponse:
    out: dict[str, Any] = {"redis": "ok", "broker": "ok", "workers": []}
    try:
        await asyncio.wait_for(gw.aredis.ping(), timeout=2)
    except (redis.RedisError, redis.exceptions.RedisClusterException, OSError, asyncio.TimeoutError) as exc:
        out.update(redis=f"error: {type(exc).__name__}", broker="unknown")
        return _not_ready(out, f"Redis is unreachable ({type(exc).__name__})")
    if not await asyncio.to_thread(_broker_ok, gw.settings):
        out.update(broker="error: unreachable")
        return _not_ready(out, "the broker is unreachable")
    try:
        out["workers"] = sorted(await asyncio.wait_for(
            asyncio.to_thread(gw.dispatcher.workers_seen, 0.5), timeout=3))
    except Exception as exc:  # a ping problem is reported, not fatal: Redis is up
        out["workers_error"] = type(exc).__name__
    out["status"] = "ok"
    return JSONResponse(out)


def _not_ready(out: dict[str, Any], why: str) -> JSONResponse:
    return JSONResponse({**out, "status": "unavailable", **error_body(503, why)}, status_code=503,
                        headers={"Retry-After": "1"})


def _broker_ok(settings: Settings) -> bool:
    url = broker_url(settings)
    if url == redis_url(settings):
        return True  # already pinged
    from kombu.connection import Connection

    try:
        with Connection(url, connect_timeout=2, ssl=broker_ssl(settings, url) or False) as conn:
            conn.ensure_connection(max_retries=1)
        return True
    except Exception:
        return False


@router.get("/metrics", response_class=Response, dependencies=[need("admin")], responses={200: {
    "description": "Prometheus text exposition", "content": {"text/plain": {"schema": {"type": "string"}}}}})
async def get_metrics(gw: GatewayDep) -> Any:
    """Prometheus exposition (``reactq.dispatcher.http.metrics.render``)."""
    from reactq.dispatcher.http import metrics

    body, content_type = await asyncio.to_thread(metrics.render, gw.settings)
    return Response(body, media_type=content_type)
