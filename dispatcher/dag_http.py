"""DAG routes of the HTTP gateway: a FastAPI ``router`` that ``reactq.dispatcher.http`` includes.

* ``POST /v1/dags`` — a ``DagRequest`` → 202 ``{dag_id, events_url, status_url, created}``.
  Bad input → 422 ``{"detail": [{"loc": ["body", field], "msg": …}]}`` (a cyclic plan names
  the steps on the cycle); nothing is stored or enqueued.
* ``GET /v1/dags/{id}`` — ``{dag_id, status, phase, round, steps: [{id, task, status,
  run_id, model, result, …}], answer, achieved, confidence, rounds, usage, …}``; 404.
* ``GET /v1/dags/{id}/events`` — SSE: ``event:`` = channel, ``id:`` = Redis stream id,
  ``data:`` = JSON; resumes after ``Last-Event-ID`` (or ``?after=``); ends after ``done``;
  a ``: keepalive`` comment after each quiet spell.
* ``POST /v1/dags/{id}/cancel`` → 202 · ``POST /v1/dags/{id}/interrupts`` ``{content}`` →
  202 ``{id}`` (409 once the DAG ended).

The routes find their settings on the gateway (``app.state.gateway``) when there is one
(sharing its async Redis client and keep-alive), else read them from the environment.
Authentication and body limits are the gateway's middleware.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis
from fastapi import APIRouter, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field, ValidationError

from reactq.dispatcher.dag import DagDispatcher
from reactq.shared.dag.state import TERMINAL_DAG_STATUSES
from reactq.shared.dag.store import DagNotFound, public_view
from reactq.shared.errors import RequestError
from reactq.shared.events import Event
from reactq.shared.redisconn import async_client
from reactq.shared.requests import DagRequest
from reactq.shared.settings import Settings

__all__ = ["DagHttp", "router"]

router = APIRouter(tags=["dags"])
_STREAM_ID = re.compile(r"^\d+(-\d+)?$")


class DagCreated(BaseModel):
    dag_id: str
    events_url: str
    status_url: str
    created: bool


class FollowUp(BaseModel):
    content: str = Field(..., min_length=1, max_length=100_000)


class DagHttp:
    """What the DAG routes share; one per app, made on first use."""

    def __init__(self, settings: Settings, *, keepalive: float = 15.0,
                 aredis: aioredis.Redis | None = None, dags: DagDispatcher | None = None) -> None:
        self.settings = settings
        self.keepalive = keepalive
        self.dags = dags or DagDispatcher(settings)
        self._aredis = aredis

    @property
    def aredis(self) -> aioredis.Redis:
        if self._aredis is None:
            self._aredis = async_client(self.settings)
        return self._aredis

    async def status_of(self, dag_id: str) -> str | None:
        raw = await self.aredis.hget(self.dags.store.keys.dag(dag_id), "status")
        return None if raw is None else raw.decode()


def _deps(request: Request) -> DagHttp:
    state = request.app.state
    deps: DagHttp | None = getattr(state, "dag_http", None)
    if deps is None:
        gateway = getattr(state, "gateway", None)
        if gateway is not None:
            deps = DagHttp(gateway.settings, keepalive=gateway.keepalive, aredis=gateway.aredis)
        else:
            keepalive = float(os.environ.get("REACTQ_SSE_KEEPALIVE", 15.0))
            deps = DagHttp(Settings(), keepalive=keepalive)
        state.dag_http = deps
    return deps


def _field_error(field: str | None, msg: str) -> JSONResponse:
    loc = ["body", field] if field else ["body"]
    return JSONResponse({"detail": [{"type": "value_error", "loc": loc, "msg": msg}]}, status_code=422)


def _not_found(exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=404)


@router.post("/v1/dags", status_code=202, response_model=DagCreated)
def create_dag(req: DagRequest, request: Request) -> Any:
    """Validate and enqueue a DAG: a goal (the planner plans) or a goal with steps."""
    deps = _deps(request)
    try:
        handle = deps.dags.submit(req)
    except RequestError as exc:
        return _field_error(exc.field, str(exc))
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)) from exc
    base = f"/v1/dags/{handle.dag_id}"
    return DagCreated(dag_id=handle.dag_id, events_url=f"{base}/events", status_url=base,
                      created=handle.created)


@router.get("/v1/dags/{dag_id}")
def get_dag(dag_id: str, request: Request) -> Any:
    """Status, phase, round, each step's status / child run / result, the answer once done."""
    try:
        return public_view(_deps(request).dags.store.load(dag_id))
    except DagNotFound as exc:
        return _not_found(exc)


@router.get("/v1/dags/{dag_id}/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}}})
async def dag_events(dag_id: str, request: Request,
                     after: str | None = Query(None, description="resume after this stream id"),
                     last_event_id: str | None = Header(None)) -> Any:
    """Server-sent events of the DAG; reconnect with ``Last-Event-ID`` to get what was missed."""
    deps = _deps(request)
    cursor = last_event_id or after  # the header is the newer position on a reconnect
    if cursor is not None and not _STREAM_ID.match(cursor):
        return JSONResponse({"detail": [{"type": "value_error", "loc": ["header", "last-event-id"],
                                         "msg": f"not a stream id: {cursor!r}"}]}, status_code=422)
    if await deps.status_of(dag_id) is None:
        return _not_found(DagNotFound(f"no DAG with id {dag_id!r} (it may have expired)"))
    return StreamingResponse(_frames(deps, dag_id, cursor), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _frames(deps: DagHttp, dag_id: str, cursor: str | None) -> AsyncIterator[str]:
    """Frames after ``cursor`` until ``done``; an ended DAG's backlog without blocking."""
    key = deps.dags.store.keys.dag_events(dag_id)
    block_ms = max(1, int(deps.keepalive * 1000))
    while True:
        if await deps.status_of(dag_id) in TERMINAL_DAG_STATUSES:
            entries = await deps.aredis.xrange(key, min=f"({cursor}" if cursor else "-")
            for raw_id, fields in entries:
                yield Event.from_fields(fields).sse(raw_id.decode())
            return
        res = await deps.aredis.xread({key: cursor or "0-0"}, block=block_ms, count=500)
        entries = res[0][1] if res else []
        for raw_id, fields in entries:
            cursor = raw_id.decode()
            event = Event.from_fields(fields)
            yield event.sse(cursor)
            if event.channel == "done":
                return
        if not entries:
            if await deps.status_of(dag_id) is None:
                return  # expired
            yield ": keepalive\n\n"


@router.post("/v1/dags/{dag_id}/cancel", status_code=202)
def cancel_dag(dag_id: str, request: Request) -> Any:
    """Cancel: running steps' child runs are cancelled, pending steps skipped."""
    try:
        handle = _deps(request).dags.handle(dag_id)
        handle.cancel()
        return {"dag_id": dag_id, "status": handle.status()["status"]}
    except DagNotFound as exc:
        return _not_found(exc)


@router.post("/v1/dags/{dag_id}/interrupts", status_code=202)
def interrupt_dag(dag_id: str, body: FollowUp, request: Request) -> Any:
    """A follow-up: steps not yet started are skipped and the DAG re-plans with it."""
    try:
        return {"id": _deps(request).dags.handle(dag_id).interrupt(body.content)}
    except DagNotFound as exc:
        return _not_found(exc)
    except RequestError as exc:
        if exc.field == "dag_id":
            return JSONResponse({"detail": str(exc)}, status_code=409)
        return _field_error(exc.field, str(exc))
