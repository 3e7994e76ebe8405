"""The schedule request (``POST /v1/schedules``, ``reactq schedules create``) and its patch.

Checked at the door, each error naming its field: ``cron`` (5 fields, or 6 with seconds
first; it must ever fire), ``interval_s`` (≥ 1; exactly one of ``cron`` and ``interval_s``),
``timezone`` (an IANA zone), ``run`` (a run request without ``idempotency_key``: each tick's
run gets ``schedule:{id}:{tick}``), ``overlap``.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationInfo, field_validator

from reactq.shared.inputs import ID_PATTERN
from reactq.shared.requests import RunRequest
from reactq.shared.schedule.times import Cadence, check_cron, check_zone

Overlap = Literal["skip", "allow", "cancel_previous"]
#: ``?count=`` of a preview: at most this many fire times.
MAX_PREVIEW = 100
#: Fire times a schedule's view shows by default.
PREVIEW = 5


class ScheduledRun(RunRequest):
    """The run each tick starts: a run request whose idempotency key the schedule sets."""

    @field_validator("idempotency_key")
    @classmethod
    def _no_key(cls, v: str | None) -> str | None:
        if v is not None:
            raise ValueError("a schedule sets each run's idempotency key (schedule:{id}:{tick}); leave it out")
        return v

    @field_validator("thread_id")
    @classmethod
    def _no_thread(cls, v: str | None) -> str | None:
        if v is not None:
            raise ValueError("scheduled runs do not take a thread_id (a tick always starts a run of its own)")
        return v


def _check_cron(v: str | None) -> str | None:
    return None if v is None else check_cron(v)


def _check_zone(v: str) -> str:
    return check_zone(v)


class ScheduleRequest(BaseModel):
    """A new schedule."""

    model_config = ConfigDict(extra="forbid")

    schedule_id: str = Field(default_factory=lambda: uuid.uuid4().hex, pattern=ID_PATTERN, max_length=128)
    cron: str | None = Field(None, max_length=200)
    """5 fields, or 6 with seconds first; wall-clock times in ``timezone``."""
    interval_s: StrictInt | None = Field(None, ge=1, le=366 * 86400, validate_default=True)
    """Every this many seconds (ticks at multiples of it since the epoch)."""
    timezone: str = Field("UTC", max_length=64)
    run: ScheduledRun
    overlap: Overlap = "skip"
    """A tick while the schedule's last run is active: skip it, start another, or cancel that one."""
    paused: StrictBool = False

    _cron = field_validator("cron")(_check_cron)
    _zone = field_validator("timezone")(_check_zone)

    @field_validator("interval_s")
    @classmethod
    def _exactly_one(cls, v: int | None, info: ValidationInfo) -> int | None:
        if "cron" not in info.data:  # the cron itself was refused: that error says enough
            return v
        if v is not None and info.data["cron"] is not None:
            raise ValueError("give either cron or interval_s, not both")
        if v is None and info.data["cron"] is None:
            raise ValueError("give one of cron (e.g. '0 2 * * *') and interval_s (seconds)")
        return v

    def cadence(self) -> Cadence:
        return Cadence(cron=self.cron, interval_s=self.interval_s, timezone=self.timezone)


class SchedulePatch(BaseModel):
    """``PATCH /v1/schedules/{id}``: the fields to change (``cron``/``interval_s`` may be
    set to null to switch from one to the other). The merged schedule is checked again."""

    model_config = ConfigDict(extra="forbid")

    cron: str | None = Field(None, max_length=200)
    interval_s: StrictInt | None = None
    timezone: str | None = Field(None, max_length=64)
    run: dict[str, Any] | None = None
    overlap: Overlap | None = None
    paused: StrictBool | None = None


#: Fields whose change moves the next tick (recomputed from now).
CADENCE_FIELDS = ("cron", "interval_s", "timezone")


def merged(spec: dict[str, Any], patch: SchedulePatch) -> tuple[ScheduleRequest, bool]:
    """The schedule after ``patch`` (validated: errors name the field), and whether its
    cadence changed."""
    changes = patch.model_dump(exclude_unset=True)
    new = ScheduleRequest.model_validate({**spec, **changes})
    moved = any(k in changes and changes[k] != spec.get(k) for k in CADENCE_FIELDS)
    return new, moved


__all__ = ["MAX_PREVIEW", "PREVIEW", "Overlap", "ScheduleRequest", "SchedulePatch", "ScheduledRun", "merged"]
