"""What comes next in a run, as a closed type, and the one function that says it.

After any step a run is in exactly one of five situations; ``next_step`` maps a state to
it. The shells carry the value out with one ``match`` each, ending in ``assert_never``, so a
new kind of step is a type error in every shell until each of them handles it:

* ``SelectTools``  tool selection, then the first messages (``steps.select_step``);
* ``CallLLM``      one loop turn: one ``chat()`` and processing its reply (``steps.llm_step``);
* ``RunTools``     run ``calls`` (in parallel), then the fan-in (``steps.tools_step``);
* ``Answer``       stream the synthesis and finish (``steps.answer_step``);
* ``Done``         nothing; ``result`` is the run's result.

The state keeps the same information as its ``phase`` field (that is what is persisted);
``next_step`` is the only reader of that field inside the engine and the shells.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from reactq.shared.engine.result import RunResult, run_result
from reactq.shared.engine.state import RunState
from reactq.shared.events import Event
from reactq.shared.models import ToolCallRequest


@dataclass(frozen=True)
class SelectTools:
    """Pick the run's tools (when there are many), then build the first messages."""


@dataclass(frozen=True)
class CallLLM:
    """One loop turn: the LLM call and the decision its reply leads to."""


@dataclass(frozen=True)
class RunTools:
    """Run the turn's calls (those past the per-turn cap are answered, never run)."""

    calls: tuple[ToolCallRequest, ...]


@dataclass(frozen=True)
class Answer:
    """Stream the user-facing answer, then finish."""


@dataclass(frozen=True)
class Done:
    """The run has ended (any status)."""

    result: RunResult


Next = SelectTools | CallLLM | RunTools | Answer | Done


def next_step(state: RunState) -> Next:
    """What ``state`` needs next (the one place that maps a state to its next step)."""
    match state.phase:
        case "select":
            return SelectTools()
        case "llm":
            return CallLLM()
        case "tools":
            return RunTools(tuple(state.pending_calls))
        case "answer":
            return Answer()
        case "done":
            return Done(run_result(state))
        case _:
            assert_never(state.phase)


@dataclass(frozen=True)
class Advance:
    """What one step did: the events it produced (not yet published), what comes next,
    and which step produced them (``None``: the run was stopped from outside the loop, by
    a failure, a cancel, the token budget, the crash limit or a wait for capacity)."""

    events: list[Event]
    next: Next
    step: Next | None = None


def advanced(state: RunState, events: list[Event], step: Next | None = None) -> Advance:
    """``events`` and what ``state`` needs next, as produced by ``step``."""
    return Advance(events, next_step(state), step)
