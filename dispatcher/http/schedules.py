"""Schedule routes: ``/v1/schedules`` (create, list), ``/v1/schedules/{id}`` (read with fire
times or a ``?from=&count=`` preview, change, delete) and ``/v1/schedules/{id}/trigger``.

Bad input is a 422 naming the field (``cron``, ``interval_s``, ``timezone``, ``run.<field>``,
``from``, ``count``); an unknown schedule a 404; a ``schedule_id`` the caller's tenant uses
already a 409. Schedule ids are per tenant: another tenant's schedule of the same id is
another schedule (an admin key names a tenant with ``?tenant=``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from reactq.dispatcher.http.errors import conflict, field_error, responses
from reactq.dispatcher.http.auth import Caller, ScheduleRead, ScheduleWrite, caller_of, need
from reactq.dispatcher.http.gateway import GatewayDep
from reactq.dispatcher.schedules import ScheduleExists, Schedules
from reactq.shared.api.schedules import ScheduleList, ScheduleView, Triggered
from reactq.shared.errors import Forbidden, RequestError
from reactq.shared.schedule.models import MAX_PREVIEW, PREVIEW, ScheduleRequest, SchedulePatch
from reactq.shared.schedule.times import parse_instant

router = APIRouter(tags=["schedules"])
#: Schedules on one page of ``GET /v1/schedules``.
MAX_LIST = 500


def _schedules(request: Request, gw: Any) -> Schedules:
    svc: Schedules | None = getattr(request.app.state, "schedules", None)
    if svc is None:
        svc = request.app.state.schedules = Schedules(gw.dispatcher)
    return svc


@router.post("/v1/schedules", status_code=201, response_model=ScheduleView, responses=responses(409))
def create_schedule(req: ScheduleRequest, request: Request, gw: GatewayDep,
                    caller: Annotated[Caller, need("schedules:write")]) -> Any:
    """A new schedule of the caller's tenant → ``{schedule_id, next_fire_times: [5 × ISO-8601
    UTC], …}``."""
    try:
        return _schedules(request, gw).create(req, caller.tenant, caller)
    except ScheduleExists as exc:
        return conflict(str(exc))
    except Forbidden:
        raise  # 403 naming the scope the schedule's run needs
    except RequestError as exc:
        return field_error(exc.field, str(exc))


@router.get("/v1/schedules", response_model=ScheduleList)
def list_schedules(request: Request, gw: GatewayDep, caller: Annotated[Caller, need("runs:read")],
                   limit: int = Query(100, ge=1, le=MAX_LIST),
                   cursor: str | None = Query(None, max_length=600)) -> Any:
    """Schedules, oldest first, each with its next fire times, a page at a time (an admin key:
    every tenant's; any other key its own tenant's)."""
    try:
        return _schedules(request, gw).page(limit=limit, cursor=cursor,
                                            tenant=None if caller.admin else caller.tenant)
    except RequestError as exc:
        return field_error(exc.field or "cursor", str(exc), where="query")


@router.get("/v1/schedules/{schedule_id}", response_model=ScheduleView)
def get_schedule(schedule: ScheduleRead, request: Request, gw: GatewayDep,
                 from_: str | None = Query(None, alias="from", max_length=64,
                                           description="list the fire times after this ISO-8601 instant"),
                 count: int = Query(PREVIEW, ge=1, le=MAX_PREVIEW)) -> Any:
    """The schedule with ``next_fire_times``, ``last_fired_at``, ``last_run_id``, ``skipped``."""
    after = None
    if from_ is not None:
        try:
            after = parse_instant(from_)
        except ValueError:
            return field_error("from", "from must be an ISO-8601 instant, e.g. 2027-03-27T00:00:00Z",
                               where="query")
    return _schedules(request, gw).get(schedule.schedule_id, schedule.tenant, after=after, count=count)


@router.patch("/v1/schedules/{schedule_id}", response_model=ScheduleView)
def patch_schedule(schedule: ScheduleWrite, patch: SchedulePatch, request: Request, gw: GatewayDep) -> Any:
    """Change fields (``paused: true|false`` pauses and resumes); the whole schedule back."""
    try:
        return _schedules(request, gw).patch(schedule.schedule_id, patch, schedule.tenant, caller_of(request))
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)) from exc
    except Forbidden:
        raise
    except RequestError as exc:
        return field_error(exc.field, str(exc))


@router.delete("/v1/schedules/{schedule_id}", status_code=204)
def delete_schedule(schedule: ScheduleWrite, request: Request, gw: GatewayDep) -> Response:
    """Remove the schedule (its runs stay)."""
    _schedules(request, gw).delete(schedule.schedule_id, schedule.tenant)
    return Response(status_code=204)


@router.post("/v1/schedules/{schedule_id}/trigger", status_code=202, response_model=Triggered)
def trigger_schedule(schedule: ScheduleWrite, request: Request, gw: GatewayDep) -> Any:
    """One run of the schedule now (it becomes ``last_run_id``)."""
    schedule_id = schedule.schedule_id
    try:
        handle = _schedules(request, gw).trigger(schedule_id, schedule.tenant)
    except RequestError as exc:
        return field_error(exc.field, str(exc))
    base = f"/v1/runs/{handle.run_id}"
    return Triggered(schedule_id=schedule_id, run_id=handle.run_id, events_url=f"{base}/events", status_url=base)
