"""Run routes: ``POST /v1/runs``, ``GET /v1/runs/{id}``, its SSE events, interrupts, cancel."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ValidationError

from reactq.dispatcher.http import threads as threads_http
from reactq.dispatcher.threads import ThreadBusy
from reactq.dispatcher.http.errors import conflict, field_error, interrupt_reply
from reactq.dispatcher.http.gateway import AfterQuery, GatewayDep, IdPath, InterruptIn, LastEventId
from reactq.dispatcher.http.sse import events_response
from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.errors import RequestError, RunNotFound
from reactq.shared.requests import RunRequest

router = APIRouter(tags=["runs"])


class RunCreated(BaseModel):
    run_id: str
    events_url: str
    status_url: str
    created: bool


@router.post("/v1/runs", status_code=202, response_model=RunCreated)
def create_run(req: RunRequest, gw: GatewayDep) -> Any:
    """Validate and enqueue a run."""
    try:
        handle = gw.dispatcher.submit(req)
    except ThreadBusy as exc:
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
def get_run(run_id: IdPath, gw: GatewayDep) -> Any:
    """Status, timestamps, number of events published, and the result once ended."""
    return gw.dispatcher.store.status(run_id)


@router.get("/v1/runs/{run_id}/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}}})
async def run_events(run_id: IdPath, gw: GatewayDep, after: AfterQuery = None,
                     last_event_id: LastEventId = None) -> Any:
    """Server-sent events; reconnect with ``Last-Event-ID`` to get exactly what was missed."""
    return await events_response(gw, gw.keys.run(run_id), gw.keys.run_events(run_id), TERMINAL_STATUSES,
                                 RunNotFound(f"no run with id {run_id!r} (it may have expired)"),
                                 after, last_event_id)


@router.post("/v1/runs/{run_id}/interrupts", status_code=202)
def interrupt_run(run_id: IdPath, body: InterruptIn, gw: GatewayDep) -> Any:
    """A follow-up message, taken into the run at its next drain point."""
    status = gw.dispatcher.store.status(run_id)["status"]
    if status in TERMINAL_STATUSES:
        return conflict(f"run {run_id} has already ended ({status})")
    return interrupt_reply(lambda: gw.dispatcher.handle(run_id).interrupt(body.content), "run_id")


@router.post("/v1/runs/{run_id}/cancel", status_code=202)
def cancel_run(run_id: IdPath, gw: GatewayDep) -> Any:
    """Stop the run at its next step boundary (it ends ``cancelled``); no-op once ended."""
    handle = gw.dispatcher.handle(run_id)
    handle.cancel()
    return {"run_id": run_id, "status": handle.status()["status"]}
