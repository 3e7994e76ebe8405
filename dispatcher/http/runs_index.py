"""``GET /v1/runs``: the run listing, a FastAPI ``router`` that the gateway includes.

``GET /v1/runs?status=&batch_id=&thread_id=&limit=&cursor=`` → ``{runs: [{run_id, status,
model, query (its first 200 characters), iterations, usage, created_at, updated_at,
batch_id, thread_id}], next_cursor}``, newest first; ``next_cursor`` is null on the last page.
``GET /v1/runs/{id}/summary`` → one such row with the whole query (404 when gone).
Bad filters → 422 naming the parameter. The listing reads the index that the run store's
scripts keep (``reactq.shared.stores.runs_index``): no SCAN. Authentication is the gateway's.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from reactq.shared.errors import RequestError
from reactq.shared.keys import Keys
from reactq.shared.redisconn import redis_url
from reactq.shared.stores.runs_index import MAX_LIMIT, RunFilter, RunsIndex
from reactq.shared.settings import Settings
from reactq.shared.stores.runs import RUN_STATUSES

__all__ = ["router"]

router = APIRouter(tags=["runs"])
_ID = r"^[A-Za-z0-9._:-]{1,200}$"


def _index(request: Request) -> RunsIndex:
    state = request.app.state
    index: RunsIndex | None = getattr(state, "runs_index", None)
    if index is None:
        gateway = getattr(state, "gateway", None)
        if gateway is not None:
            index = RunsIndex(gateway.dispatcher.redis, gateway.keys)
        else:
            settings = Settings()
            index = RunsIndex(redis.Redis.from_url(redis_url(settings)), Keys(settings.key_prefix))
        state.runs_index = index
    return index


def _query_error(field: str, msg: str) -> JSONResponse:
    return JSONResponse({"detail": [{"type": "value_error", "loc": ["query", field], "msg": msg}]},
                        status_code=422)


@router.get("/v1/runs")
async def list_runs(
    request: Request,
    status: str | None = Query(None, description=f"one of {', '.join(RUN_STATUSES)}"),
    batch_id: str | None = Query(None, pattern=_ID),
    thread_id: str | None = Query(None, pattern=_ID),
    limit: int = Query(50, ge=1, le=MAX_LIMIT),
    cursor: str | None = Query(None, max_length=600),
) -> Any:
    """Runs, newest first, filtered by status / batch / thread, a page at a time."""
    if status is not None and status not in RUN_STATUSES:
        return _query_error("status", f"status must be one of {', '.join(RUN_STATUSES)}")
    index = _index(request)
    try:
        return await asyncio.to_thread(index.page, RunFilter(status, batch_id, thread_id),
                                       limit=limit, cursor=cursor)
    except RequestError as exc:
        return _query_error(exc.field or "query", str(exc))


@router.get("/v1/runs/{run_id}/summary")
async def run_summary(run_id: str, request: Request) -> Any:
    """The listing's row for one run, with its whole query (the viewer's run page)."""
    row = await asyncio.to_thread(_index(request).one, run_id)
    if row is None:
        return JSONResponse({"detail": f"no run with id {run_id!r} (it may have expired)"}, status_code=404)
    return row
