"""Approval routes: a run's approvals, the operators' inbox, and the decision.

``GET /v1/runs/{id}/approvals`` → ``{approvals: [...]}`` (oldest first);
``GET /v1/approvals?status=pending&limit=&cursor=`` → ``{approvals, next_cursor}``, every
run's pending approvals, oldest first; ``POST /v1/runs/{id}/approvals/{approval_id}``
``{decision, args_digest, args?, message?, by?}`` → 200 ``{approval_id, status}``: 409 when
it was decided already (naming how) or ``args_digest`` is not the pending request's, 404 for
an unknown run or approval, 422 naming a bad field.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from reactq.dispatcher.http.errors import conflict, field_error, not_found, responses
from reactq.dispatcher.http.auth import ApprovalWrite, Caller, RunRead, need
from reactq.dispatcher.http.gateway import GatewayDep, IdPath
from reactq.shared.api.approvals import ApprovalPage, Decided, DecisionIn, RunApprovals
from reactq.shared.errors import ApprovalConflict, RequestError
from reactq.shared.stores.approvals import MAX_LIMIT

router = APIRouter(tags=["approvals"])

#: The decision's body as ``/openapi.json`` shows it (validated in the route, after the 404s).
DECISION_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": DecisionIn.model_json_schema()}}}}


@router.get("/v1/runs/{run_id}/approvals", response_model=RunApprovals, responses=responses(404))
def run_approvals(run_id: RunRead, gw: GatewayDep) -> Any:
    """The run's approvals, every status, oldest first."""
    return {"approvals": gw.dispatcher.handle(run_id).approvals()}


@router.post("/v1/runs/{run_id}/approvals/{approval_id}", response_model=Decided,
             responses=responses(404, 409), openapi_extra=DECISION_BODY)
def decide_approval(run_id: ApprovalWrite, approval_id: IdPath, gw: GatewayDep,
                    body: dict[str, Any] = Body(...)) -> Any:
    """Approve, edit, reject or respond; once, for the arguments the decider saw. An unknown
    run or approval is a 404 whatever the body says."""
    door = gw.dispatcher.door
    door.store.status(run_id)  # 404 for an unknown run
    if gw.dispatcher.approvals.get(run_id, approval_id) is None:
        return not_found(f"run {run_id} has no approval {approval_id}")
    try:
        req = DecisionIn.model_validate(body)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)) from exc
    try:
        return door.decide_approval(run_id, approval_id, req.decision, args_digest=req.args_digest,
                                    args=req.args, message=req.message, by=req.by)
    except ApprovalConflict as exc:
        return conflict(str(exc))
    except RequestError as exc:
        return field_error(exc.field, str(exc))


@router.get("/v1/approvals", response_model=ApprovalPage)
def approvals_inbox(gw: GatewayDep, caller: Annotated[Caller, need("runs:read")],
                    status: str = Query("pending"),
                    limit: int = Query(50, ge=1, le=MAX_LIMIT),
                    cursor: str | None = Query(None, max_length=600)) -> Any:
    """Every run's pending approvals, oldest first, a page at a time."""
    if status != "pending":
        return field_error("status", "status: only 'pending' is listed across runs "
                                     "(GET /v1/runs/{id}/approvals lists every status)", where="query")
    try:
        return gw.dispatcher.approvals.inbox(limit=limit, cursor=cursor, sees=caller.sees)
    except RequestError as exc:
        return field_error(exc.field, str(exc), where="query")
