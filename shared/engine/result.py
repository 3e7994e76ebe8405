"""What a run leaves behind, computed in one place: its result, its step summary, its turn.

``run_result`` is the one source of the figures a finished run reports: the ``done`` event
(``ending._done``) and the stored result (``RunStore.commit``) both read it, so they can no
longer disagree (they did: ``elapsed`` was rounded to 2 digits in one and 3 in the other, and
a failed run reported ``iterations: 0`` in its event but its turn count in the store).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from reactq.shared.engine.callevents import turn_fields
from reactq.shared.engine.recorded import turn_view
from reactq.shared.engine.state import RunState

#: ``elapsed`` is in seconds with two decimals, like ``iter_elapsed``.
ELAPSED_DIGITS = 2


@dataclass(frozen=True)
class RunResult:
    """A finished run's result (the stored ``result`` hash field and the ``done`` payload)."""

    answer: str
    status: str
    iterations: int
    usage: dict[str, Any]
    elapsed: float
    error: str | None
    mode: str
    model: str
    output: Any = None
    """The answer as parsed JSON, for a run with an ``output_schema`` (else None)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_result(state: RunState) -> RunResult:
    """The result of ``state`` (meaningful once the run ended).

    ``iterations`` is 0 for a failed run (``done {answer: "Agent error: …",
    iterations: 0}``; ``done.iterations = result.iterations``).
    """
    answer = state.final_answer if state.final_answer is not None else (state.answer or "")
    return RunResult(
        answer=answer,
        status=state.status,
        iterations=0 if state.status == "failed" else state.iteration,
        usage=state.usage.public(),
        elapsed=round((state.ended_at or state.started_at) - state.started_at, ELAPSED_DIGITS),
        error=state.error,
        mode=state.mode,
        model=state.model,
        output=state.output,
    )


def step_summary(state: RunState) -> str:
    """One line per step (the max-iterations and budget answers end with it)."""
    if not state.steps:
        return "(no steps taken)"
    lines = []
    for k, s in enumerate(state.steps, 1):
        if s.type == "final_answer":
            lines.append(f"  Step {k}: final answer")
        elif s.error:
            lines.append(f"  Step {k}: called {s.tool_name} -> ERROR: {s.error}")
        else:
            lines.append(f"  Step {k}: called {s.tool_name} -> OK")
    return "\n".join(lines)


def run_tool_names(state: RunState) -> list[str]:
    """The run's tools: the selection once made, else its allowlist."""
    return state.tool_names if state.tool_names is not None else state.available_tools


def turn_summary(state: RunState) -> dict[str, Any]:
    """What a tool task needs of the pending turn, without the whole history."""
    turn = {
        "step_no": state.step_no,
        "calls": [c.model_dump() for c in state.pending_calls],
        "tool_names": run_tool_names(state),
        "metadata": state.metadata,
        "tenant": state.tenant,
        **turn_fields(state.iteration, state.held_calls, state.tools_started_at),
    }
    if state.approval is not None:
        turn["approval"] = state.approval
    if state.recorded is not None:
        if view := turn_view(state):
            turn["recorded"] = view
    return turn
