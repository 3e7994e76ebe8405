"""Run routes: ``POST /v1/runs``, ``GET /v1/runs/{id}``, its SSE events, interrupts, cancel."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from reactq.dispatcher import threads_http
from reactq.dispatcher.http.errors import conflict, field_error, not_found
from reactq.dispatcher.http.gateway import Gateway, GatewayDep
from reactq.dispatcher.http.sse import SSE_HEADERS, check_cursor, event_stream
from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.errors import RequestError, RunNotFound, TooManyRequests
from reactq.shared.inputs import ID_PATTERN
from reactq.shared.requests import RunRequest

#: Checked before the id is used to build a Redis key (``ID:events`` is a 422, not a read).
RunId = Annotated[str, Path(pattern=ID_PATTERN, max_length=128)]

router = APIRouter(tags=["runs"])


class RunCreated(BaseModel):
    run_id: str
    events_url: str
    status_url: str
    created: bool


class InterruptIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: StrictStr = Field(..., min_length=1)
    """At most ``REACTQ_MAX_INTERRUPT_CHARS`` (checked by the handle, for the CLI too)."""


@router.post("/v1/runs", status_code=202, response_model=RunCreated)
def create_run(req: RunRequest, gw: GatewayDep) -> Any:
    """Validate and enqueue a run."""
    try:
        handle = gw.dispatcher.submit(req)
    except threads_http.ThreadBusy as exc:
        return threads_http.busy_reply(exc)
    except RequestError as exc:
        return field_error(exc.field, str(exc))
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)) from exc
    if handle.injected:
        return threads_http.submit_reply(handle)
    base = f"/v1/runs/{handle.run_id}"
    return RunCreated(run_id=handle.run_id, events_url=f"{base}/events", status_url=base,
                      created=handle.created)


@router.get("/v1/runs/{run_id}")
def get_run(run_id: RunId, gw: GatewayDep) -> Any:
    """Status, timestamps, number of events published, and the result once ended."""
    return gw.dispatcher.store.status(run_id)


def _ended(gw: Gateway, run_id: str) -> Any:
    async def ended() -> bool | None:
        status = await gw.status_of(gw.keys.run(run_id))
        return None if status is None else status in TERMINAL_STATUSES
    return ended


@router.get("/v1/runs/{run_id}/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}}})
async def run_events(run_id: RunId, gw: GatewayDep,
                     after: str | None = Query(None, description="resume after this stream id"),
                     last_event_id: str | None = Header(None)) -> Any:
    """Server-sent events; reconnect with ``Last-Event-ID`` to get exactly what was missed."""
    cursor = last_event_id or after  # the header is the newer position on a reconnect
    if (why := check_cursor(cursor)) is not None:
        return field_error("last-event-id" if last_event_id else "after", why,
                           where="header" if last_event_id else "query")
    ended, key = _ended(gw, run_id), gw.keys.run_events(run_id)
    if await gw.hub.ended(key, ended) is None:  # shared with the stream's own first check
        return not_found(RunNotFound(f"no run with id {run_id!r} (it may have expired)"))
    return StreamingResponse(
        event_stream(gw.hub, gw.aredis, key, cursor, ended, gw.keepalive),
        media_type="text/event-stream", headers=SSE_HEADERS)


@router.post("/v1/runs/{run_id}/interrupts", status_code=202)
def interrupt_run(run_id: RunId, body: InterruptIn, gw: GatewayDep) -> Any:
    """A follow-up message, taken into the run at its next drain point."""
    status = gw.dispatcher.store.status(run_id)["status"]
    if status in TERMINAL_STATUSES:
        return conflict(f"run {run_id} has already ended ({status})")
    try:
        return {"id": gw.dispatcher.handle(run_id).interrupt(body.content)}
    except TooManyRequests:
        raise
    except RequestError as exc:
        if exc.field == "run_id":
            return conflict(str(exc))
        return field_error(exc.field, str(exc))


@router.post("/v1/runs/{run_id}/cancel", status_code=202)
def cancel_run(run_id: RunId, gw: GatewayDep) -> Any:
    """Stop the run at its next step boundary (it ends ``cancelled``); no-op once ended."""
    handle = gw.dispatcher.handle(run_id)
    handle.cancel()
    return {"run_id": run_id, "status": handle.status()["status"]}
