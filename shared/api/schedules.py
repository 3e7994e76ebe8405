"""The bodies the schedule routes answer with."""

from __future__ import annotations

from typing import Any

from reactq.shared.api.base import ApiModel


class ScheduleView(ApiModel):
    """A schedule (``GET /v1/schedules/{id}``, and what its create and change answer)."""

    schedule_id: str
    tenant: str
    """Whose schedule it is (its runs are that tenant's); schedule ids are per tenant."""
    cron: str | None
    interval_s: int | None
    timezone: str
    run: dict[str, Any]
    overlap: str
    paused: bool
    next_fire_times: list[str]
    """ISO-8601 UTC: 5 after now, or ``count`` after ``from``."""
    next_tick: str | None
    """The next tick the scheduler will handle (null while paused)."""
    last_fired_at: str | None
    last_run_id: str | None
    skipped: int
    """Ticks skipped by the overlap policy or the catch-up window."""
    fired: int
    last_error: str | None
    created_at: float
    updated_at: float


class ScheduleList(ApiModel):
    """A page of schedules, oldest first."""

    schedules: list[ScheduleView]
    next_cursor: str | None = None


class Triggered(ApiModel):
    """A run started now by ``POST /v1/schedules/{id}/trigger``."""

    schedule_id: str
    run_id: str
    events_url: str
    status_url: str
