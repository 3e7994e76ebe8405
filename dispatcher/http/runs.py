"""Run routes: ``POST /v1/runs``, ``GET /v1/runs/{id}``, its SSE events, interrupts, cancel.

Acting on a run that has ended (cancel, interrupt) is a 409 ``conflict``, as for DAGs and
batches: the answer says the act did nothing.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from pydantic import Field, ValidationError

from reactq.dispatcher.http import threads as threads_http
from reactq.dispatcher.http.errors import conflict, field_error, interrupt_reply, responses
from reactq.dispatcher.http.gateway import AfterQuery, GatewayDep, LastEventId
from reactq.dispatcher.http.sse import SSE_RESPONSE, events_response
from reactq.dispatcher.threads import ThreadBusy
from reactq.dispatcher.http.auth import Caller, RunRead, RunWrite, need
from reactq.shared.api.runs import (
    InterruptAccepted,
    InterruptIn,
    RunCancelling,
    RunCreated,
    RunStatus,
    ThreadInjected,
)
from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.errors import Forbidden, RequestError, RunNotFound, TooManyRequests
from reactq.shared.requests import RunRequest
from reactq.shared.stores.records import run_record

router = APIRouter(tags=["runs"])

#: ``POST /v1/runs`` answers one of two bodies, told apart by ``injected``.
SubmitReply = Annotated[RunCreated | ThreadInjected, Field(discriminator="injected")]


@router.post("/v1/runs", status_code=202, response_model=SubmitReply, responses=responses(409, 413, 415, 429))
def create_run(req: RunRequest, gw: GatewayDep, caller: Annotated[Caller, need("runs:write")]) -> Any:
    """Validate and enqueue a run of the caller's tenant. On a thread whose run is still
    going, ``multitask_strategy`` decides: ``inject`` answers ``ThreadInjected`` (the active
    run takes the query), ``reject`` a 409, the others queue a new run."""
    try:
        handle = gw.dispatcher.submit(req, tenant=caller.tenant, caller=caller)
    except ThreadBusy as exc:
        return threads_http.busy_reply(exc)
    except (TooManyRequests, Forbidden):
        raise  # 429 with Retry-After, 403 naming the scope (the error handlers)
    except RequestError as exc:
        return field_error(exc.field, str(exc))
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)) from exc
    base = f"/v1/runs/{handle.run_id}"
    if handle.injected:
        return ThreadInjected(run_id=handle.run_id, interrupt_id=handle.interrupt_id or "",
                              events_url=f"{base}/events", status_url=base)
    return RunCreated(run_id=handle.run_id, events_url=f"{base}/events", status_url=base,
                      created=handle.created)


@router.get("/v1/runs/{run_id}", response_model=RunStatus, responses=responses(404))
def get_run(run_id: RunRead, gw: GatewayDep) -> Any:
    """Status, timestamps, number of events published, and the result once ended."""
    return gw.dispatcher.store.status(run_id)


@router.get("/v1/runs/{run_id}/events", response_model=None, response_class=StreamingResponse, responses={**SSE_RESPONSE, **responses(404)})
async def run_events(run_id: RunRead, gw: GatewayDep, after: AfterQuery = None,
                     last_event_id: LastEventId = None) -> Any:
    """Server-sent events (``Event``); reconnect with ``Last-Event-ID`` to get exactly what was
    missed. The stream ends after ``done``."""
    return await events_response(gw, run_record(gw.keys, run_id), TERMINAL_STATUSES,
                                 RunNotFound(f"no run with id {run_id!r} (it may have expired)"),
                                 after, last_event_id)


@router.post("/v1/runs/{run_id}/interrupts", status_code=202, response_model=InterruptAccepted,
             responses=responses(404, 409, 413, 415, 429))
def interrupt_run(run_id: RunWrite, body: InterruptIn, gw: GatewayDep) -> Any:
    """A follow-up message, taken into the run at its next drain point; 409 once it ended."""
    status = gw.dispatcher.store.status(run_id)["status"]
    if status in TERMINAL_STATUSES:
        return conflict(f"run {run_id} has already ended ({status})", status=status)
    return interrupt_reply(lambda: gw.dispatcher.door.interrupt_run(run_id, body.content), "run_id")


@router.post("/v1/runs/{run_id}/cancel", status_code=202, response_model=RunCancelling,
             responses=responses(404, 409))
def cancel_run(run_id: RunWrite, gw: GatewayDep) -> Any:
    """Stop the run at its next step boundary (it ends ``cancelled``); 409 once it ended."""
    door = gw.dispatcher.door
    status = door.store.status(run_id)["status"]
    if status in TERMINAL_STATUSES:
        return conflict(f"run {run_id} has already ended ({status})", status=status)
    door.cancel_run(run_id)
    return RunCancelling(run_id=run_id, status=door.store.status(run_id)["status"])
