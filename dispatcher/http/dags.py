"""DAG routes: ``POST /v1/dags``, ``GET /v1/dags/{id}``, its SSE events, cancel, interrupts.

* ``POST /v1/dags`` — a ``DagRequest`` → 202 ``{dag_id, events_url, status_url, created}``.
  Bad input → 422 naming the field (a cyclic plan names the steps on the cycle); nothing is
  stored or enqueued.
* ``GET /v1/dags/{id}`` — ``{dag_id, status, phase, round, steps: [...], answer, …}``; 404.
* ``GET /v1/dags/{id}/events`` — SSE, the same framing and resume rules as a run's.
* ``POST /v1/dags/{id}/cancel`` → 202 · ``POST /v1/dags/{id}/interrupts`` ``{content}`` →
  202 ``{id}`` (409 once the DAG ended).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from reactq.dispatcher.http.errors import conflict, field_error, not_found
from reactq.dispatcher.http.gateway import Gateway, GatewayDep
from reactq.dispatcher.http.sse import SSE_HEADERS, check_cursor, event_stream
from reactq.shared.dag.state import TERMINAL_DAG_STATUSES
from reactq.shared.dag.store import DagNotFound, public_view
from reactq.shared.errors import RequestError, TooManyRequests
from reactq.shared.inputs import ID_PATTERN
from reactq.shared.requests import DagRequest

__all__ = ["router"]

#: Checked before the id is used to build a Redis key (``ID:events`` is a 422, not a read).
DagId = Annotated[str, Path(pattern=ID_PATTERN, max_length=128)]

router = APIRouter(tags=["dags"])


class DagCreated(BaseModel):
    dag_id: str
    events_url: str
    status_url: str
    created: bool


class FollowUp(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: StrictStr = Field(..., min_length=1)
    """At most ``REACTQ_MAX_INTERRUPT_CHARS`` (checked by the handle, for the CLI too)."""


@router.post("/v1/dags", status_code=202, response_model=DagCreated)
def create_dag(req: DagRequest, gw: GatewayDep) -> Any:
    """Validate and enqueue a DAG: a goal (the planner plans) or a goal with steps."""
    try:
        handle = gw.dags.submit(req)
    except RequestError as exc:
        return field_error(exc.field, str(exc))
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)) from exc
    base = f"/v1/dags/{handle.dag_id}"
    return DagCreated(dag_id=handle.dag_id, events_url=f"{base}/events", status_url=base,
                      created=handle.created)


@router.get("/v1/dags/{dag_id}")
def get_dag(dag_id: DagId, gw: GatewayDep) -> Any:
    """Status, phase, round, each step's status / child run / result, the answer once done."""
    return public_view(gw.dags.store.load(dag_id))


def _ended(gw: Gateway, dag_id: str) -> Any:
    async def ended() -> bool | None:
        status = await gw.status_of(gw.keys.dag(dag_id))
        return None if status is None else status in TERMINAL_DAG_STATUSES
    return ended


@router.get("/v1/dags/{dag_id}/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}}})
async def dag_events(dag_id: DagId, gw: GatewayDep,
                     after: str | None = Query(None, description="resume after this stream id"),
                     last_event_id: str | None = Header(None)) -> Any:
    """Server-sent events of the DAG; reconnect with ``Last-Event-ID`` to get what was missed."""
    cursor = last_event_id or after  # the header is the newer position on a reconnect
    if (why := check_cursor(cursor)) is not None:
        return field_error("last-event-id" if last_event_id else "after", why,
                           where="header" if last_event_id else "query")
    ended, key = _ended(gw, dag_id), gw.keys.dag_events(dag_id)
    if await gw.hub.ended(key, ended) is None:  # shared with the stream's own first check
        return not_found(DagNotFound(f"no DAG with id {dag_id!r} (it may have expired)"))
    return StreamingResponse(
        event_stream(gw.hub, gw.aredis, key, cursor, ended, gw.keepalive),
        media_type="text/event-stream", headers=SSE_HEADERS)


@router.post("/v1/dags/{dag_id}/cancel", status_code=202)
def cancel_dag(dag_id: DagId, gw: GatewayDep) -> Any:
    """Cancel: running steps' child runs are cancelled, pending steps skipped."""
    handle = gw.dags.handle(dag_id)
    handle.cancel()
    return {"dag_id": dag_id, "status": handle.status()["status"]}


@router.post("/v1/dags/{dag_id}/interrupts", status_code=202)
def interrupt_dag(dag_id: DagId, body: FollowUp, gw: GatewayDep) -> Any:
    """A follow-up: steps not yet started are skipped and the DAG re-plans with it."""
    try:
        return {"id": gw.dags.handle(dag_id).interrupt(body.content)}
    except TooManyRequests:
        raise
    except RequestError as exc:
        if exc.field == "dag_id":
            return conflict(str(exc))
        return field_error(exc.field, str(exc))
