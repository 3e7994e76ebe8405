"""DAG routes: ``POST /v1/dags``, ``GET /v1/dags`` (listing), ``GET /v1/dags/{id}``, its SSE
events, cancel, interrupts.

* ``POST /v1/dags`` — a ``DagRequest`` → 202 ``DagCreated``. Bad input → 422 naming the field
  (a cyclic plan names the steps on the cycle); nothing is stored or enqueued.
* ``GET /v1/dags?status=&limit=&cursor=`` → ``DagPage``, newest first, cursors as for runs.
* ``GET /v1/dags/{id}`` — ``DagStatus``; 404.
* ``GET /v1/dags/{id}/events`` — SSE, the same framing and resume rules as a run's.
* ``POST /v1/dags/{id}/cancel`` → 202 ``DagCancelling`` · ``POST /v1/dags/{id}/interrupts``
  ``{content}`` → 202 ``InterruptAccepted``; both 409 once the DAG ended.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from reactq.dispatcher.approvals import with_waiting
from reactq.dispatcher.http.errors import conflict, field_error, interrupt_reply, responses
from reactq.dispatcher.http.auth import Caller, DagRead, DagWrite, need
from reactq.dispatcher.http.gateway import AfterQuery, CursorQuery, GatewayDep, LastEventId, LimitQuery
from reactq.dispatcher.http.sse import SSE_RESPONSE, events_response
from reactq.shared.api.dags import DagCancelling, DagCreated, DagPage, DagStatus, DagStatusName
from reactq.shared.api.runs import InterruptAccepted, InterruptIn
from reactq.shared.dag.state import TERMINAL_DAG_STATUSES
from reactq.shared.stores.dags import DagNotFound, public_view
from reactq.shared.errors import RequestError
from reactq.shared.requests import DagRequest
from reactq.shared.stores.listing import dag_index, dag_row
from reactq.shared.stores.records import dag_record

__all__ = ["router"]

router = APIRouter(tags=["dags"])


@router.post("/v1/dags", status_code=202, response_model=DagCreated, responses=responses(413, 415))
def create_dag(req: DagRequest, gw: GatewayDep, caller: Annotated[Caller, need("dags:write")]) -> Any:
    """Validate and enqueue a DAG: a goal (the planner plans) or a goal with steps."""
    try:
        handle = gw.dags.submit(req, tenant=caller.tenant)
    except RequestError as exc:
        return field_error(exc.field, str(exc))
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)) from exc
    base = f"/v1/dags/{handle.dag_id}"
    return DagCreated(dag_id=handle.dag_id, events_url=f"{base}/events", status_url=base,
                      created=handle.created)


@router.get("/v1/dags", response_model=DagPage)
async def list_dags(gw: GatewayDep, caller: Annotated[Caller, need("runs:read")],
                    status: Annotated[DagStatusName | None, Query()] = None,
                    limit: LimitQuery = 50, cursor: CursorQuery = None) -> Any:
    """DAGs, newest first, filtered by status, a page at a time; an admin key lists every
    tenant's, any other key its own tenant's."""
    index = dag_index(gw.dispatcher.redis, gw.keys, gw.settings.run_ttl_seconds)
    page = await asyncio.to_thread(index.page, status=status, limit=limit, cursor=cursor,
                                   tenant=None if caller.admin else caller.tenant)
    return DagPage(dags=[dag_row(r) for r in page["rows"]], next_cursor=page["next_cursor"])


@router.get("/v1/dags/{dag_id}", response_model=DagStatus, responses=responses(404))
def get_dag(dag_id: DagRead, gw: GatewayDep) -> Any:
    """Status, phase, round, each step's status / child run / result, the answer once done."""
    return with_waiting(gw.dispatcher.store, public_view(gw.dags.store.load(dag_id)))


@router.get("/v1/dags/{dag_id}/events", response_model=None, response_class=StreamingResponse,
            responses={**SSE_RESPONSE, **responses(404)})
async def dag_events(dag_id: DagRead, gw: GatewayDep, after: AfterQuery = None,
                     last_event_id: LastEventId = None) -> Any:
    """Server-sent events of the DAG (``Event``); reconnect with ``Last-Event-ID`` to get what was missed."""
    return await events_response(gw, dag_record(gw.keys, dag_id), TERMINAL_DAG_STATUSES,
                                 DagNotFound(f"no DAG with id {dag_id!r} (it may have expired)"),
                                 after, last_event_id)


@router.post("/v1/dags/{dag_id}/cancel", status_code=202, response_model=DagCancelling,
             responses=responses(404, 409))
def cancel_dag(dag_id: DagWrite, gw: GatewayDep) -> Any:
    """Cancel: running steps' child runs are cancelled, pending steps skipped; 409 once it ended."""
    handle = gw.dags.handle(dag_id)
    status = gw.dags.store.load(dag_id).status
    if status in TERMINAL_DAG_STATUSES:
        return conflict(f"DAG {dag_id} has already ended ({status})", status=status)
    handle.cancel()
    return DagCancelling.model_validate({"dag_id": dag_id, "status": gw.dags.store.load(dag_id).status})


@router.post("/v1/dags/{dag_id}/interrupts", status_code=202, response_model=InterruptAccepted,
             responses=responses(404, 409, 413, 415, 429))
def interrupt_dag(dag_id: DagWrite, body: InterruptIn, gw: GatewayDep) -> Any:
    """A follow-up: steps not yet started are skipped and the DAG re-plans with it; 409 once it ended."""
    return interrupt_reply(lambda: gw.dags.handle(dag_id).interrupt(body.content), "dag_id")
