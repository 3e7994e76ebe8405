"""The run's serializable state: everything a worker needs to continue a run.

``RunState`` round-trips through JSON (``dump_state`` / ``load_state``), so a Celery worker
can stop after any step and another can continue. ``schema_version`` is bumped on every
incompatible change; ``load_state`` refuses versions it does not know.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, TypeAdapter
from reactq.shared.errors import StateConflict
from reactq.shared.models import Artifact, ChatMessage, ToolCallRequest, Usage

SCHEMA_VERSION = 1
SCHEMA_VERSION_SUMMARIES = {1: "first persisted shape"}

Phase = Literal["select", "llm", "tools", "answer", "done"]
Status = Literal["queued", "running", "waiting", "succeeded", "failed", "cancelled"]
TERMINAL_STATUSES: tuple[Status, ...] = ("succeeded", "failed", "cancelled")
"""The statuses a run (or a DAG) ends in; every other status is ``queued`` or ``running``."""


class StepRecord(BaseModel):
    """One executed, failed or blocked tool call, or the accepted final answer."""

    type: Literal["tool_call", "final_answer"]
    iteration: int
    reasoning: str = ""
    tool_name: str | None = None
    tool_args: dict[str, Any] = Field(default_factory=dict)
    tool_call_id: str | None = None
    observation: str | None = None
    error: str | None = None
    content_type: str = "text"
    artifacts: list[Artifact] = Field(default_factory=list)
    answer: str | None = None


class ToolOutcome(BaseModel):
    """What running one tool call produced (after hooks). ``observation`` is the raw text."""

    tool_call_id: str
    tool_name: str
    observation: str = ""
    error: str | None = None
    content_type: str = "text"
    artifacts: list[Artifact] = Field(default_factory=list)
    blocked: bool = False
    uncertain: bool = False
    crashed: bool = False  # not run again: its worker died or hung REACTQ_MAX_TASK_CRASHES times
    unavailable: bool = False  # not run: no live worker offered the tool (REACTQ_TOOL_UNAVAILABLE_S)
    started_at: float = 0.0
    ended_at: float = 0.0
    worker: str | None = None
    side_effects: list[str] = Field(default_factory=list)
    approval: str | None = None
    """The call waited for a person: how it was decided (approved, edited, rejected, …)."""
    approved_args: dict[str, Any] | None = None
    """The arguments a person approved in place of the model's (an edit)."""
    ask: str | None = None
    """Set by a PreToolUse hook's ``ask``: the call was not run, it waits for a person."""
    announced: bool = False
    """Its ``iteration done`` is already on the stream (a turn where a call may wait publishes
    each call's as it completes); the fan-in does not publish it again."""
    reused: bool = False
    """Answered from a recorded ledger (``engine/recorded.py``): the tool was not executed."""


class Interrupt(BaseModel):
    """A user message sent while the run works. ``cursor`` orders messages per run."""

    id: str
    content: str
    cursor: str


class RunState(BaseModel):
    """A run between two steps. Mutated in place by ``reactq.shared.engine.loop``."""

    schema_version: int = SCHEMA_VERSION
    run_id: str
    query: str
    model: str
    mode: Literal["json", "native"]
    max_iterations: int
    completion_check: bool = True
    system_prompt: str | None = None
    """Extra instructions appended to the default system prompt (RunRequest.system_prompt)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    available_tools: list[str] = Field(default_factory=list)
    """The run's allowlist, resolved when it was created."""
    tool_names: list[str] | None = None
    """The tools the loop uses (after selection); None until the run has started."""
    thread_id: str | None = None
    """The thread the run belongs to (RunRequest.thread_id); the engine does not use it."""
    history: list[ChatMessage] = Field(default_factory=list)
    """The thread's earlier turns (user/assistant pairs), before the query; empty without a thread."""
    phase: Phase = "select"
    status: Status = "running"
    messages: list[ChatMessage] = Field(default_factory=list)
    iteration: int = 0
    tool_call_count: int = 0
    cycle_counts: dict[str, int] = Field(default_factory=dict)
    checklist_fired: bool = False
    verify_pending: bool = False
    checklist_candidate: str | None = None
    """The final answer the checklist held back; it stands if no turn is left to ask again."""
    parse_retried: bool = False
    steps: list[StepRecord] = Field(default_factory=list)
    trace: list[str] = Field(default_factory=list)
    """Synthesis trace lines (tool calls, results cut to the synthesis limit, reasoning)."""
    pending_calls: list[ToolCallRequest] = Field(default_factory=list)
    """The turn's calls that run (at most ``max_tool_calls_per_turn``)."""
    refused_calls: list[ToolCallRequest] = Field(default_factory=list)
    """The turn's calls past the cap: answered with an error observation, never run."""
    pending_reasoning: str = ""
    tools_started_at: float = 0.0
    held_calls: list[str] = Field(default_factory=list)
    """Ids of the turn's calls that may wait for a person (``approval.may_wait``): no
    ``iteration start`` at dispatch; whoever runs the call publishes it, once it runs."""
    answer: str | None = None
    """The loop's own (brief) answer; the synthesis falls back to it."""
    final_answer: str | None = None
    """The streamed, user-facing answer once the run succeeded."""
    usage: Usage = Field(default_factory=Usage)
    seq: int = 0
    """The seq of the last event this state has produced."""
    interrupt_cursor: str | None = None
    started_at: float = 0.0
    ended_at: float | None = None
    step_no: int = 0
    """Bumped on every persisted step; the Celery shell saves with compare-and-set on it."""
    error: str | None = None
    priority: Literal["interactive", "batch"] = "interactive"
    """Flow control: who gets a rate-limited model first (RunRequest.priority)."""
    token_budget: int | None = None
    """RunRequest.token_budget; the spend itself is kept by the shell (it survives crashes)."""
    approval: dict[str, Any] | None = None
    """RunRequest.approval (``ApprovalPolicy`` as JSON): which calls wait for a person."""
    tenant: str = "default"
    """Who owns the run (the key that made it): its quotas, its cost metrics."""
    cost_budget_usd: float | None = None
    """RunRequest.cost_budget_usd: the run's cap in dollars (checked before each call)."""
    batch_id: str | None = None
    """The batch whose ``cost_budget_usd`` holds every call of the run (None: no batch cap)."""
    batch_cost_budget_usd: float | None = None
    """That batch's cap in dollars, over all its runs (held before each call)."""
    rate_limited_since: float | None = None
    """Set while the current step waits for model capacity (one ``rate_limited`` event a wait)."""
    output_schema: dict[str, Any] | None = None
    """RunRequest.output_schema: the answer is a JSON value valid against it."""
    output: Any = None
    """The parsed answer once it validated (``output_schema`` runs)."""
    output_attempts: int = 0
    """Answer attempts made so far (each one step; the first plus the repairs)."""
    output_feedback: list[ChatMessage] = Field(default_factory=list)
    """The failed attempts and the validator's errors, which the next attempt sees."""
    answer_guarded: bool = False
    """An ANSWER guardrail checks the answer: no unchecked text ends up in ``done``."""
    answer_ready: bool = False
    """The answer is ``answer`` as it is, with no model call left (the budget's summary): the
    answer step only has the ANSWER guardrails check it before it is published."""
    webhook_on_done: bool = False
    """The request's webhook wants ``run.done``: the shell arms its delivery with the last commit."""
    forked_from: dict[str, Any] | None = None
    """``{run_id, turn, reuse}`` of the run this one was forked from (``engine/fork.py``)."""
    recorded: dict[str, Any] | None = None
    """Recorded calls that may answer this run's calls (``engine/recorded.py``: ``Recorded``
    as JSON): another run's ledger from one of its turns on, the policy, the matches made."""


_ADAPTER = TypeAdapter(RunState)


def dump_state(state: RunState) -> str:
    return _ADAPTER.dump_json(state).decode()


def load_state(raw: str | bytes) -> RunState:
    state = _ADAPTER.validate_json(raw)
    if state.schema_version != SCHEMA_VERSION:
        raise StateConflict(
            f"run state schema version {state.schema_version} is not supported "
            f"(this reactq reads version {SCHEMA_VERSION})"
        )
    return state
