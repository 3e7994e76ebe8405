"""At most ``REACTQ_MAX_TOOL_CALLS_PER_TURN`` calls of one LLM reply run.

One reply with 32 slow calls must not occupy a fleet. The calls past the cap stay in the
assistant message (every call of a reply needs its answer in the history) and are answered
with an error observation instead of being run; the shells only ever see the calls that run
(``state.pending_calls``), so both of them apply the cap without knowing about it.
"""

from __future__ import annotations

from reactq.shared.engine import prompts as P
from reactq.shared.engine.state import RunState, ToolOutcome
from reactq.shared.models import ToolCallRequest


def split(calls: list[ToolCallRequest], cap: int) -> tuple[list[ToolCallRequest], list[ToolCallRequest]]:
    """(the calls that run, the calls refused), in call order."""
    return calls[:cap], calls[cap:]


def refused_outcomes(state: RunState, cap: int, now: float) -> dict[str, ToolOutcome]:
    """An error outcome for each refused call of the turn."""
    total = len(state.pending_calls) + len(state.refused_calls)
    text = P.TOO_MANY_TOOL_CALLS.format(n=total, limit=cap)
    return {c.id: ToolOutcome(tool_call_id=c.id, tool_name=c.name, error=text,
                              started_at=now, ended_at=now)
            for c in state.refused_calls}
