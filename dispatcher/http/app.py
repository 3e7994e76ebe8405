"""The gateway app: ``create_app`` wires settings, routers, exception handlers, middleware.

Routes live in one router module per concern (``runs``, ``dags``, ``batches``, ``ops``);
each takes the one dependency ``GatewayDep``. A new router is included with one line in
``ROUTERS`` below.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis
from fastapi import APIRouter, FastAPI

from reactq.dispatcher.http import catalog as catalog_http
from reactq.dispatcher.http import mcp_mount
from reactq.dispatcher.http import flow as flow_http
from reactq.dispatcher.http import runs_index as runs_index_http
from reactq.dispatcher.http import threads as threads_http
from reactq.dispatcher.http import evals as evals_http
from reactq.dispatcher.http import ui as ui_http
from reactq.dispatcher.http import (approvals, batches, dags, errors, forks, keys, openapi, ops, responses, runs,
                                         schedules, webhooks)
from reactq.dispatcher.http.gateway import Gateway
from reactq.dispatcher.http.auth import KeyAuth
from reactq.dispatcher.http.middleware import BodyLimit, StrictJson
from reactq.dispatcher.http.pacing import Paced
from reactq.dispatcher.http.responses_errors import OpenAIErrors
from reactq.shared.errors import ConfigError
from reactq.shared.redisconn import check_cluster_mode
from reactq.shared.settings import Settings

log = logging.getLogger("reactq.http")


ROUTERS: list[APIRouter] = [runs.router, forks.router, batches.router, dags.router, ops.router, keys.router, runs_index_http.router,
                            ui_http.router, threads_http.router, catalog_http.router,
                            flow_http.router, schedules.router, approvals.router, webhooks.router, evals_http.router,
                            responses.router]


DESCRIPTION = (
    "ReAct agents as durable distributed jobs: runs, their server-sent event streams, DAGs, batches, threads.\n\n"
    "Every 4xx and 5xx answer is `{\"error\": {\"code\", \"message\", \"field\"?, \"details\"?}}` with a code "
    "from a closed list; 429 and 503 carry `Retry-After`. Acting on a run, DAG or batch that has ended "
    "(cancel, interrupt) is a 409 `conflict`. With `REACTQ_API_TOKEN` set, every route but `/healthz` and "
    "`/readyz` needs `Authorization: Bearer <token>` (use *Authorize* here).")


#: The collector's thresholds in the gateway: young generations as Python's defaults, a full
#: collection after 100 (not 10) young-generation passes. A thousand streams opening grow the
#: live objects by ~150,000, and each full collection on the way walked all of them (~0.1 s
#: on the loop); cyclic garbage still dies young, or at the next (rarer) full collection.
GC_THRESHOLDS = (700, 10, 100)

_frozen = False


def _freeze_startup_objects() -> None:
    """Out of the collector's sight, once per process (tests build several apps): what
    startup built (modules, routes, schemas: ~85,000 objects) lives as long as the process,
    and a full collection under load need not walk it again and again."""
    global _frozen
    if not _frozen:  # once per process (tests build several apps)
        _frozen = True
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)


async def _refuse_a_cluster_node(gw: Gateway) -> None:
    """A Redis Cluster node without ``REACTQ_REDIS_CLUSTER=true``: the gateway does not start
    (``ConfigError`` naming the setting) instead of answering 500s on ``MOVED``."""
    try:
        await asyncio.to_thread(check_cluster_mode, gw.dispatcher.redis, gw.settings)
    except (redis.RedisError, OSError):
        pass  # Redis down: the gateway starts and /readyz says so


def create_app(settings: Settings | None = None, *, keepalive: float | None = None) -> FastAPI:
    """The gateway app. ``keepalive`` defaults to ``REACTQ_SSE_KEEPALIVE`` (15 s)."""
    settings = settings or Settings()
    if keepalive is None:
        keepalive = settings.sse_keepalive
    gw = Gateway(settings, keepalive)
    mcp_endpoints: list[mcp_mount.McpEndpoint] = []

    @asynccontextmanager
    async def gateway_lifespan() -> AsyncIterator[None]:
        await _refuse_a_cluster_node(gw)
        try:
            await gw.resume_batches()
        except (redis.RedisError, redis.exceptions.RedisClusterException, OSError, ConfigError) as exc:
            # Liveness does not need Redis: the gateway starts and /readyz says what is missing.
            log.warning("could not look for unfinished batches: %s", exc)
        _freeze_startup_objects()
        yield
        await gw.close()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with gateway_lifespan(), mcp_endpoints[0].serving():  # the gateway's, then /mcp's server
            yield

    # redirect_slashes off: ``/v1/runs/`` is a 404 in the one error shape, not a redirect.
    app = FastAPI(title="reactq", version="0.1.0", lifespan=lifespan, description=DESCRIPTION, redirect_slashes=False,
                  responses=errors.responses(*errors.COMMON_ERRORS))
    app.state.gateway = gw
    errors.install(app)
    openapi.install(app)
    for router in ROUTERS:
        app.include_router(router)
    mcp_endpoints.append(mcp_mount.install(app, gw))
    # Added innermost first: auth refuses before a large body is read at all, and only a
    # body within the limit is parsed.
    app.add_middleware(StrictJson)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    if settings.api_token:
        app.add_middleware(KeyAuth, token=settings.api_token, gateway=gw)
    # Around auth: the Responses routes answer every error (a 401 included) as OpenAI does.
    app.add_middleware(OpenAIErrors)
    # Outermost: a burst of requests enters the app a few per turn of the loop (``pacing``).
    app.add_middleware(Paced)
    return app
