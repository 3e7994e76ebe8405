"""What a due tick does, pure: fire, skip, or cancel the schedule's previous run and fire.

* ``overlap`` decides when the schedule's last run is still active: ``skip`` the tick
  (counted in ``skipped``), ``allow`` another run beside it, ``cancel_previous`` (ask that
  run to stop at its next step boundary, then start the tick's run).
* A tick older than the catch-up window (``REACTQ_SCHEDULE_CATCHUP_S``) when a scheduler
  meets it is skipped and counted; the ticks within it fire, late rather than lost.
"""

from __future__ import annotations

from typing import Literal

Action = Literal["fire", "skip", "cancel_previous"]


def overlap_action(overlap: str, previous_active: bool) -> Action:
    """What a tick does given the overlap policy and whether the last run is active."""
    if not previous_active or overlap == "allow":
        return "fire"
    if overlap == "cancel_previous":
        return "cancel_previous"
    return "skip"


def too_late(tick: float, now: float, catchup_s: float) -> bool:
    """A tick this old when met is skipped, not fired."""
    return tick < now - catchup_s


def tick_key(schedule_id: str, tick_iso: str) -> str:
    """The idempotency key of a tick's run: one run per tick, whoever fires it."""
    return f"schedule:{schedule_id}:{tick_iso}"


__all__ = ["Action", "overlap_action", "tick_key", "too_late"]
