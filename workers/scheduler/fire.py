"""Firing ticks: the due schedules' runs, created exactly once per tick.

``Firer.fire_due`` is called by the active scheduler at every turn of the beat loop. For each
schedule whose next tick has come (``schedules:due``), tick by tick:

1. a tick older than the catch-up window is skipped (all such ticks at once, counted);
2. otherwise the tick's run id is the one its idempotency key ``schedule:{id}:{tick}`` names
   for the schedule's tenant (two tenants' schedules of one id fire runs of their own):
   if that run exists (a scheduler died after creating it) it is the tick's run; else the
   overlap policy decides, and the run comes in by the door (``Door.create_run``: the
   tenant's quota, the dollar-cap rule, written only if absent) like any other. A tick the
   door refuses is skipped and counted, and the schedule's ``last_error`` names the rule;
3. the tick is handed on with a compare-and-set on the schedule (``ScheduleStore.advance``).

Whoever runs this at the same time (a scheduler that lost its lock without knowing yet, or
one that died half-way and its successor) creates no second run and counts nothing twice.
"""

from __future__ import annotations

import logging
import math
import time
from functools import cached_property

import redis
from pydantic import ValidationError

from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.errors import RequestError
from reactq.shared.requests import RunRequest
from reactq.shared.schedule.policy import overlap_action, tick_key, too_late
from reactq.shared.schedule.times import count_until, iso, next_after
from reactq.shared.service import Door, Origin, Stores, celery_send
from reactq.shared.service.ops import cancel_run
from reactq.shared.settings import Settings
from reactq.shared.stores.idempotency import idempotent_id
from reactq.shared.stores.schedules import ScheduleRecord

log = logging.getLogger("reactq.scheduler")


class Firer:
    """Creates the runs of due ticks (Redis and the broker only; no worker code)."""

    def __init__(self, settings: Settings, *, redis_client: redis.Redis | None = None) -> None:
        self.settings = settings
        self.stores = Stores.from_settings(settings, redis_client=redis_client)
        self.keys = self.stores.keys
        self.r = self.stores.redis
        self.schedules = self.stores.schedules
        self.runs = self.stores.runs

    @cached_property
    def door(self) -> Door:
        return Door(self.stores, celery_send(self.settings, "reactq-scheduler-send"))

    def fire_due(self, now: float | None = None) -> float:
        """Fire every tick that has come; the seconds until the next one (inf: none)."""
        now = time.time() if now is None else now
        for name in self.schedules.due_names(now):
            try:
                self.fire_schedule(name, now)
            except redis.RedisError:
                raise
            except Exception:  # one broken schedule must not stop the others
                log.exception("schedule %s: firing failed", name)
        nxt = self.schedules.next_due()
        return math.inf if nxt is None else max(0.0, nxt - time.time())

    def fire_schedule(self, name: str, now: float) -> None:
        """Fire the due ticks of the schedule ``name`` (``ScheduleRecord.name``)."""
        rec = self.schedules.named(name)
        if rec is None or rec.paused or rec.next_tick is None:
            self.schedules.set_due(name, None)  # deleted or paused: not due
            return
        tick: int | None = rec.next_tick
        while tick is not None and tick <= now:
            tick = self._hand_on(rec, tick, now)
        if tick is not None:  # None: someone else handed the tick on (and set it due)
            self.schedules.set_due(name, tick)

    def _hand_on(self, rec: ScheduleRecord, tick: int, now: float) -> int | None:
        """Handle ``tick``; the next tick, or None when the compare-and-set was lost."""
        cutoff = now - self.settings.schedule_catchup_s
        # A run made before a crash (then handed on by nobody) is the tick's run, whatever its
        # age: the tick fired, and is not counted skipped as well.
        if too_late(tick, now, self.settings.schedule_catchup_s) and not self.runs.exists(self._run_id(rec, tick)):
            n, nxt = count_until(rec.cadence, tick, cutoff)
            log.warning("schedule %s: %d tick(s) from %s skipped (older than the catch-up window)",
                        rec.name, n, iso(tick))
            return nxt if self.schedules.advance(rec.name, tick, nxt, skipped=n) else None
        nxt = next_after(rec.cadence, tick)
        run_id, error = self._fire_tick(rec, tick)
        won = self.schedules.advance(rec.name, tick, nxt, run_id=run_id,
                                     skipped=0 if run_id else 1, error=error)
        if not won:
            return None
        rec.last_run_id = run_id or rec.last_run_id
        return nxt

    def _fire_tick(self, rec: ScheduleRecord, tick: int) -> tuple[str | None, str]:
        """``(run id, "")`` when the tick has its run, ``(None, why)`` when it is skipped."""
        key = tick_key(rec.schedule_id, iso(tick))
        run_id = self._run_id(rec, tick)
        if self.runs.exists(run_id):
            return run_id, ""  # created before a crash, or by another scheduler
        prev = rec.last_run_id
        action = overlap_action(rec.spec.get("overlap", "skip"), prev is not None and self._active(prev))
        if action == "skip":
            log.info("schedule %s: tick %s skipped, run %s still active", rec.name, iso(tick), prev)
            return None, ""
        if action == "cancel_previous" and prev is not None:
            self._cancel(prev)
        try:
            req = RunRequest.model_validate({**rec.spec["run"], "idempotency_key": key})
        except ValidationError as exc:
            return None, f"the schedule's run is no longer valid: {exc.errors()[0]['msg']}"
        origin = Origin("schedule", schedule_id=rec.schedule_id, scheduled_for=iso(tick))
        try:
            got = self.door.create_run(req, tenant=rec.tenant, origin=origin, run_id=run_id)
        except (RequestError, ValidationError) as exc:
            log.warning("schedule %s: tick %s skipped, refused at the door: %s", rec.name, iso(tick), exc)
            return None, refusal(exc)
        log.info("schedule %s: tick %s → run %s", rec.name, iso(tick), got.run_id)
        return got.run_id, ""

    @staticmethod
    def _run_id(rec: ScheduleRecord, tick: int) -> str:
        return idempotent_id(tick_key(rec.schedule_id, iso(tick)), tenant=rec.tenant)

    def _active(self, run_id: str) -> bool:
        [[status]] = self.runs.fields_of([run_id], "status")
        return status is not None and status not in TERMINAL_STATUSES

    def _cancel(self, run_id: str) -> None:
        """As ``reactq cancel``: the flag, then a nudge so a run waiting on tools ends now."""
        if cancel_run(self.runs, self.door.send, run_id):
            log.info("cancelled run %s (overlap: cancel_previous)", run_id)


def refusal(exc: Exception) -> str:
    """A tick's refusal as the schedule's ``last_error``: the rule and its message."""
    if isinstance(exc, ValidationError):
        return f"the schedule's run is no longer valid: {exc.errors()[0]['msg']}"
    field = getattr(exc, "field", None)
    return f"refused at the door ({field}): {exc}" if field else f"refused at the door: {exc}"


__all__ = ["Firer"]
