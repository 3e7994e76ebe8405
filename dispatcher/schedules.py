"""Schedules from the dispatcher's side: what ``/v1/schedules`` and ``reactq schedules`` do.

Both doors share this one service: validate (the request model names each bad field; the
run's model and tools are checked against the catalog, as a run's are), store, change, read
back with the next fire times, and start a run now (``trigger``). Ticks themselves are fired
by ``reactq scheduler`` (``reactq.workers.scheduler``), never here.

Decisions: a schedule's default view lists the next 5 fire times after now (also while it is
paused: they show what its cadence is, and pass without runs until it resumes); resume starts
from the first tick after now (ticks during a pause are not caught up); a change of ``cron``,
``interval_s`` or ``timezone`` also starts from the first tick after now; ``trigger`` always
starts a run (no overlap check: it is asked for by hand) and that run becomes ``last_run_id``.
"""

from __future__ import annotations

import time
from typing import Any

from reactq.dispatcher.client import Dispatcher, RunHandle
from reactq.shared.errors import RequestError, ScheduleNotFound
from reactq.shared.requests import RunRequest
from reactq.shared.schedule.models import PREVIEW, ScheduleRequest, SchedulePatch, merged
from reactq.shared.schedule.times import fire_times, iso, next_after
from reactq.shared.stores.keys import Caller
from reactq.shared.stores.schedules import ScheduleRecord, ScheduleStore
from reactq.shared.tenants.tenancy import DEFAULT_TENANT


class ScheduleExists(RequestError):
    """``schedule_id`` is taken (HTTP 409)."""


class Schedules:
    """The schedule operations over one dispatcher's Redis."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.d = dispatcher
        self.records: ScheduleStore = dispatcher.stores.schedules

    def _check_run(self, run: dict[str, Any], tenant: str, caller: Caller | None) -> None:
        """The door's checks of the runs the schedule will make (``Door.check_run``: the
        registries, the scopes the run needs, the dollar-cap rule), the field under ``run.``.
        Each tick's run passes the whole admission again when it is made."""
        self.d.door.check_run(run, tenant=tenant, caller=caller)

    def create(self, req: ScheduleRequest, tenant: str = DEFAULT_TENANT,
               caller: Caller | None = None) -> dict[str, Any]:
        """Store a new schedule of ``tenant`` (its runs are the tenant's); its view with the
        next fire times. ``caller``: the key that asks (checked for the scopes its run needs)."""
        self._check_run(req.run.model_dump(exclude_unset=True), tenant, caller)
        first = None if req.paused else next_after(req.cadence(), time.time())
        if self.records.get(req.schedule_id, tenant) is not None or not self.records.create(req, first, tenant):
            raise ScheduleExists(f"schedule {req.schedule_id!r} exists", field="schedule_id")
        return self.get(req.schedule_id, tenant)

    def record(self, schedule_id: str, tenant: str = DEFAULT_TENANT) -> ScheduleRecord:
        """``tenant``'s schedule of that id (another tenant's is not found: ids are per tenant)."""
        rec = self.records.get(schedule_id, tenant)
        if rec is None:
            raise ScheduleNotFound(f"no schedule with id {schedule_id!r}")
        return rec

    def get(self, schedule_id: str, tenant: str = DEFAULT_TENANT, *, after: float | None = None,
            count: int = PREVIEW) -> dict[str, Any]:
        """The schedule with ``next_fire_times``: ``count`` ticks after ``after`` (default now)."""
        return self.view(self.record(schedule_id, tenant), after=after, count=count)

    @staticmethod
    def view(rec: ScheduleRecord, *, after: float | None = None, count: int = PREVIEW) -> dict[str, Any]:
        start = time.time() if after is None else after
        return {**rec.view(), "next_fire_times": [iso(t) for t in fire_times(rec.cadence, start, count)]}

    def list(self) -> list[dict[str, Any]]:
        return [self.view(rec) for rec in self.records.all()]

    def page(self, *, limit: int, cursor: str | None, tenant: str | None = None) -> dict[str, Any]:
        """``{schedules: [...], next_cursor}``, oldest first (``tenant``: only its own)."""
        recs, nxt = self.records.page(limit=limit, cursor=cursor)
        return {"schedules": [self.view(rec) for rec in recs if tenant is None or rec.tenant == tenant],
                "next_cursor": nxt}

    def patch(self, schedule_id: str, patch: SchedulePatch, tenant: str = DEFAULT_TENANT,
              caller: Caller | None = None) -> dict[str, Any]:
        """Change fields (the merged schedule is validated again, errors naming the field)."""
        rec = self.record(schedule_id, tenant)
        new, moved = merged({**rec.spec, "schedule_id": schedule_id}, patch)
        if patch.run is not None:
            self._check_run(patch.run, rec.tenant, caller)
        resumed = rec.paused and not new.paused
        move = moved or resumed or new.paused != rec.paused
        nxt = None if new.paused else next_after(new.cadence(), time.time())
        self.records.update(new, nxt, move=move, name=rec.name)
        return self.get(schedule_id, tenant)

    def set_paused(self, schedule_id: str, paused: bool, tenant: str = DEFAULT_TENANT) -> dict[str, Any]:
        return self.patch(schedule_id, SchedulePatch(paused=paused), tenant)

    def delete(self, schedule_id: str, tenant: str = DEFAULT_TENANT) -> None:
        if not self.records.delete(self.record(schedule_id, tenant).name):
            raise ScheduleNotFound(f"no schedule with id {schedule_id!r}")

    def trigger(self, schedule_id: str, tenant: str = DEFAULT_TENANT) -> RunHandle:
        """One run now, filed under the schedule (no ``scheduled_for``: it is no tick's)."""
        rec = self.record(schedule_id, tenant)
        handle = self.d.submit(RunRequest.model_validate(rec.spec["run"]), schedule_id=schedule_id,
                               tenant=rec.tenant)
        self.records.note_trigger(rec.name, handle.run_id)
        return handle


__all__ = ["ScheduleExists", "Schedules"]
