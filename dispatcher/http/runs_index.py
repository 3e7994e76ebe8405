"""``GET /v1/runs``: the run listing, a FastAPI ``router`` that the gateway includes.

``GET /v1/runs?status=&batch_id=&thread_id=&schedule_id=&forked_from=&limit=&cursor=`` → ``RunPage``
(``{runs: [{run_id, status, model, query (its first 200 characters), iterations, usage,
created_at, updated_at, batch_id, thread_id, schedule_id, scheduled_for, forked_from}], next_cursor}``),
newest first; ``next_cursor`` is null on the last page.
``GET /v1/runs/{id}/summary`` → one such row with the whole query (404 when gone).
Bad filters → 422 naming the parameter. The listing reads the index that the run store's
scripts keep (``reactq.shared.stores.runs_index``): no SCAN. Authentication is the gateway's.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import redis
from fastapi import APIRouter, Query, Request

from reactq.dispatcher.http.auth import Caller, RunRead, need
from reactq.dispatcher.http.errors import field_error, not_found, responses
from reactq.dispatcher.http.gateway import CursorQuery, IdQuery, LimitQuery, ThreadIdQuery
from reactq.shared.api.runs import RunPage, RunRow, RunStatusName
from reactq.shared.errors import RequestError
from reactq.shared.keys import Keys
from reactq.shared.redisconn import redis_url
from reactq.shared.settings import Settings
from reactq.shared.stores.runs_index import RunFilter, RunsIndex

__all__ = ["router"]

router = APIRouter(tags=["runs"])


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


@router.get("/v1/runs", response_model=RunPage)
async def list_runs(
    request: Request,
    caller: Annotated[Caller, need("runs:read")],
    status: Annotated[RunStatusName | None, Query()] = None,
    batch_id: IdQuery = None,
    thread_id: ThreadIdQuery = None,
    schedule_id: IdQuery = None,
    forked_from: IdQuery = None,
    limit: LimitQuery = 50,
    cursor: CursorQuery = None,
) -> Any:
    """Runs, newest first, filtered by status / batch / thread / schedule / parent (the forks
    of a run), a page at a time."""
    index = _index(request)
    try:
        # An admin lists every tenant's runs; any other key its own tenant's.
        tenant = None if caller.admin else caller.tenant
        return await asyncio.to_thread(index.page, RunFilter(status, batch_id, thread_id, schedule_id,
                                                             tenant=tenant, forked_from=forked_from),
                                       limit=limit, cursor=cursor)
    except RequestError as exc:
        return field_error(exc.field or "cursor", str(exc), where="query")


@router.get("/v1/runs/{run_id}/summary", response_model=RunRow, responses=responses(404))
async def run_summary(run_id: RunRead, request: Request) -> Any:
    """The listing's row for one run, with its whole query (the viewer's run page)."""
    row = await asyncio.to_thread(_index(request).one, run_id)
    if row is None:
        return not_found(f"no run with id {run_id!r} (it may have expired)")
    return row
