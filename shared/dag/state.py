"""A DAG between two tasks: everything a worker needs to continue it (persisted as JSON).

``DagState`` lives in the ``state`` field of ``reactq:dag:{id}`` and is saved with
compare-and-set on ``version`` (``reactq.shared.stores.dags``), so two workers can never both apply
a change to the same version: advancing the DAG is atomic.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, TypeAdapter
from reactq.shared.errors import StateConflict
from reactq.shared.engine.state import TERMINAL_STATUSES, Status
from reactq.shared.models import Usage

from .models import AnalysisResult

SCHEMA_VERSION = 1

StepStatus = Literal["pending", "running", "completed", "failed", "skipped"]
DagPhase = Literal["planning", "executing", "analyzing", "synthesizing", "done"]
DagStatus = Status  # a DAG's statuses are a run's
TERMINAL_DAG_STATUSES = TERMINAL_STATUSES
FINISHED_STEP = ("completed", "failed", "skipped")


class StepState(BaseModel):
    """One step of the current round and its child run."""

    id: str
    task: str
    dependencies: list[str] = Field(default_factory=list)
    tool_hint: str | None = None
    model_hint: str | None = None
    status: StepStatus = "pending"
    run_id: str | None = None
    """The child run executing this step (its own events stream and ReAct loop)."""
    model: str | None = None
    """The registry name of the model the child run uses (from ``model_hint``)."""
    result: str | None = None
    """The step's summary: the child's answer, or why it failed or was skipped."""
    error: str | None = None
    started_at: float | None = None
    completed_at: float | None = None
    duration: float | None = None
    usage: dict[str, Any] = Field(default_factory=dict)
    cursor: str | None = None
    """The last child event forwarded as progress (a stream id)."""

    def public(self) -> dict[str, Any]:
        return self.model_dump(exclude={"cursor"})


class RoundRecord(BaseModel):
    """What one finished round did and what the analyzer thought of it (for re-planning)."""

    round: int
    steps: list[StepState]
    analysis: AnalysisResult | None = None


class DagState(BaseModel):
    """The whole DAG. Mutated in place by ``reactq.shared.dag.machine``."""

    schema_version: int = SCHEMA_VERSION
    dag_id: str
    tenant: str = "default"
    """Who owns the DAG; its child runs are created for the same tenant."""
    goal: str
    followups: list[str] = Field(default_factory=list)
    """User follow-ups (interrupts) taken in so far; they extend the goal."""
    model: str
    """The registry name of the planner / analyzer / synthesis model."""
    tools: list[str] | None = None
    max_concurrency: int = 5
    max_rounds: int = 3
    metadata: dict[str, Any] = Field(default_factory=dict)
    phase: DagPhase = "planning"
    status: DagStatus = "running"
    round: int = 1
    auto_replans: int = 0
    injected: bool = False
    """A follow-up arrived during this round: the next re-plan is free."""
    steps: list[StepState] = Field(default_factory=list)
    history: list[RoundRecord] = Field(default_factory=list)
    analysis: AnalysisResult | None = None
    answer: str | None = None
    usage: Usage = Field(default_factory=Usage)
    seq: int = 0
    """The seq of the last event this state produced."""
    version: int = 0
    interrupt_cursor: str | None = None
    tick: int = 0
    tick_due: float = 0.0
    started_at: float = 0.0
    ended_at: float | None = None
    error: str | None = None
    output_schema: dict[str, Any] | None = None
    """DagRequest.output_schema: the final answer is JSON valid against it."""
    output: Any = None
    """The parsed final answer once it validated."""

    def effective_goal(self) -> str:
        """The goal with every follow-up the user sent appended."""
        extra = "".join(f"\n\nFollow-up from the user: {f}" for f in self.followups)
        return self.goal + extra

    def step(self, step_id: str) -> StepState | None:
        return next((s for s in self.steps if s.id == step_id), None)


_ADAPTER = TypeAdapter(DagState)


def dump_dag(state: DagState) -> str:
    return _ADAPTER.dump_json(state).decode()


def load_dag(raw: str | bytes) -> DagState:
    state = _ADAPTER.validate_json(raw)
    if state.schema_version != SCHEMA_VERSION:
        raise StateConflict(f"unknown DAG state schema version {state.schema_version}")
    return state
