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

from typing import Any

from fastapi import APIRouter
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ValidationError

from reactq.dispatcher.http.errors import field_error, interrupt_reply
from reactq.dispatcher.http.gateway import AfterQuery, GatewayDep, IdPath, InterruptIn, LastEventId
from reactq.dispatcher.http.sse import events_response
from reactq.shared.dag.state import TERMINAL_DAG_STATUSES
from reactq.shared.stores.dags import DagNotFound, public_view
from reactq.shared.errors import RequestError
from reactq.shared.requests import DagRequest

__all__ = ["router"]

router = APIRouter(tags=["dags"])


class DagCreated(BaseModel):
    dag_id: str
    events_url: str
    status_url: str
    created: bool


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
def get_dag(dag_id: IdPath, gw: GatewayDep) -> Any:
    """Status, phase, round, each step's status / child run / result, the answer once done."""
    return public_view(gw.dags.store.load(dag_id))


@router.get("/v1/dags/{dag_id}/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}}})
async def dag_events(dag_id: IdPath, gw: GatewayDep, after: AfterQuery = None,
                     last_event_id: LastEventId = None) -> Any:
    """Server-sent events of the DAG; reconnect with ``Last-Event-ID`` to get what was missed."""
    return await events_response(gw, gw.keys.dag(dag_id), gw.keys.dag_events(dag_id), TERMINAL_DAG_STATUSES,
                                 DagNotFound(f"no DAG with id {dag_id!r} (it may have expired)"),
                                 after, last_event_id)


@router.post("/v1/dags/{dag_id}/cancel", status_code=202)
def cancel_dag(dag_id: IdPath, gw: GatewayDep) -> Any:
    """Cancel: running steps' child runs are cancelled, pending steps skipped."""
    handle = gw.dags.handle(dag_id)
    handle.cancel()
    return {"dag_id": dag_id, "status": handle.status()["status"]}


@router.post("/v1/dags/{dag_id}/interrupts", status_code=202)
def interrupt_dag(dag_id: IdPath, body: InterruptIn, gw: GatewayDep) -> Any:
    """A follow-up: steps not yet started are skipped and the DAG re-plans with it."""
    return interrupt_reply(lambda: gw.dags.handle(dag_id).interrupt(body.content), "dag_id")
