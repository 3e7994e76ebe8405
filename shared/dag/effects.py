"""What the DAG machine says must happen: its transitions' output types, and the ending.

A ``Transition`` is the events to publish (each with the next ``seq``) plus the effects the
Celery shell carries out *after* it saved the state (start a child run, cancel one, send a
task). ``conclude`` and ``result_of`` write the DAG's last event and its stored result: the
one place where the ``done`` payload is built. Pure: no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from reactq.shared.events import Event

from .config import DagConfig
from .models import AnalysisResult
from .state import DagState


@dataclass(frozen=True)
class StartRun:
    """Create child run ``run_id`` (unless it exists) and enqueue its first step."""

    step_id: str
    run_id: str
    request: dict[str, Any]


@dataclass(frozen=True)
class CancelRun:
    """Raise the cancel flag of a child run and nudge it so that it stops now."""

    run_id: str


@dataclass(frozen=True)
class Send:
    """Enqueue a DAG task (by name) after the save."""

    task: str
    args: list[Any]
    countdown: float | None = None


Effect = StartRun | CancelRun | Send


@dataclass
class Transition:
    events: list[Event] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)

    def __iadd__(self, other: Transition) -> Transition:
        self.events += other.events
        self.effects += other.effects
        return self


@dataclass(frozen=True)
class Env:
    """What transitions need from outside: settings, the clock, model routing, id making."""

    config: DagConfig
    now: float
    model_for: Callable[[str | None], str]
    """A ``model_hint`` (None = general) → the registry name of the step's model."""
    new_id: Callable[[], str] = lambda: uuid.uuid4().hex


def emit(state: DagState, channel: str, **data: Any) -> Event:
    state.seq += 1
    return Event(channel, {"seq": state.seq, **data})


def conclude(state: DagState, answer: str, env: Env, *, status: str | None = None,
             pending: list[str] | None = None) -> list[Event]:
    """The last event: ``done`` with the answer and the DAG's totals."""
    state.answer = answer
    state.phase = "done"
    state.ended_at = env.now
    state.tick_due = 0.0
    if status is None:
        achieved = state.analysis is not None and state.analysis.achieved
        worked = any(s.status == "completed" for s in state.steps)
        status = "succeeded" if achieved or worked else "failed"
    state.status = status  # type: ignore[assignment]
    data = result_of(state)
    if pending:
        data["pending_injections"] = pending
    return [emit(state, "done", **data)]


def result_of(state: DagState) -> dict[str, Any]:
    """The ``done`` payload, also stored as the DAG's ``result``."""
    analysis = state.analysis or AnalysisResult()
    return {"answer": state.answer or "", "achieved": analysis.achieved,
            "confidence": analysis.confidence, "rounds": state.round,
            "usage": state.usage.public(),
            "elapsed": round((state.ended_at or state.started_at) - state.started_at, 3),
            "status": state.status, "error": state.error, "output": state.output}
