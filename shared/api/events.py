"""The server-sent events of ``GET /v1/runs/{id}/events`` and ``GET /v1/dags/{id}/events``.

Each frame is ``id: <stream id>`` (resume with ``Last-Event-ID``), ``event: <channel>``,
``data: <JSON payload>``; every payload carries ``seq`` (1, 2, 3 … per run or DAG). ``Event``
is the union of the frames, told apart by ``event``. Payloads may gain fields; the ones
listed are never renamed.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from reactq.shared.api.base import ApiModel


class Payload(ApiModel):
    """What every event's data carries."""

    seq: int
    """Position in the run's (or DAG's) stream: 1, 2, 3 …"""


class StepData(Payload):
    """A ReAct step (run) or a plan step (DAG)."""

    type: str | None = None
    """``thinking`` (an LLM call), ``iteration`` (a tool call), ``answer`` (the loop ends)."""
    status: str | None = None
    """``start`` or ``done`` (a DAG step: its new status)."""
    iteration: int | None = None
    """The turn number."""
    reasoning: str | None = None
    """thinking/done: what the model said before its tool calls."""
    tool_name: str | None = None
    """iteration: the tool called."""
    tool_args: Any = None
    """iteration/start: its arguments."""
    tool_call_id: str | None = None
    """iteration: the call's id."""
    observation: str | None = None
    """iteration/done: the tool's result."""
    error: Any = None
    """iteration/done: the tool's error, if it failed."""
    iter_elapsed: float | None = None
    """iteration/done: seconds the call took."""
    reused: bool | None = None
    """iteration/done: true when the call was answered from a recorded ledger (a fork's
    parent run) and the tool was not executed."""
    step_id: str | None = None
    """DAG: the plan step."""
    run_id: str | None = None
    """DAG: the step's child run."""


class AnswerData(Payload):
    """The streamed final answer."""

    status: Literal["start", "delta", "done"]
    """``start``, then ``delta``s carrying ``content``, then ``done``."""
    content: str | None = None
    """delta: the next piece of the answer."""


class CompactData(Payload):
    """The context guard compacted the history."""

    original_messages: int | None = None
    """Messages before."""
    kept_messages: int | None = None
    """Messages kept."""


class PhaseData(Payload):
    """A phase of the run or DAG started or ended (``selecting_tools``, ``rate_limited``,
    a DAG's ``planning`` / ``executing`` / ``analyzing`` / ``synthesizing`` …)."""

    phase: str | None = None
    """Run: the phase."""
    name: str | None = None
    """DAG: the phase."""
    status: str | None = None
    """DAG: ``start`` or ``done``."""


class InjectData(Payload):
    """A follow-up (interrupt) was taken into the run or DAG."""

    type: Literal["inject"] = "inject"
    """Always ``inject``."""
    content: str
    """The follow-up's text."""


class ErrorData(Payload):
    """The run failed, or a fallback was taken."""

    message: str
    """What went wrong."""
    kind: str | None = None
    """A machine-readable kind (``llm``, ``budget``, ``max_iterations``, …)."""


class WarningData(Payload):
    """Something worth knowing that changed nothing (a DAG plan's warning)."""

    message: str
    """The warning."""
    kind: str | None = None
    """Its kind."""


class DoneData(Payload):
    """Always the last event."""

    answer: str
    """The final answer."""
    status: str
    """``succeeded``, ``failed`` or ``cancelled``."""
    iterations: int | None = None
    """Run: ReAct turns taken."""
    usage: dict[str, Any] | None = None
    """Tokens spent."""
    elapsed: float | None = None
    """Run: seconds from the first step to the end."""


class _Frame(ApiModel):
    id: str
    """The stream id: send it back as ``Last-Event-ID`` to resume after this event."""


class StepEvent(_Frame):
    """``event: step``."""

    event: Literal["step"] = "step"
    data: StepData


class StepProgressEvent(_Frame):
    """``event: step_progress`` (DAG): a tool call of a step's child run."""

    event: Literal["step_progress"] = "step_progress"
    data: StepData


class AnswerEvent(_Frame):
    """``event: answer``."""

    event: Literal["answer"] = "answer"
    data: AnswerData


class CompactEvent(_Frame):
    """``event: compact``."""

    event: Literal["compact"] = "compact"
    data: CompactData


class PhaseEvent(_Frame):
    """``event: phase``."""

    event: Literal["phase"] = "phase"
    data: PhaseData


class InjectEvent(_Frame):
    """``event: inject``."""

    event: Literal["inject"] = "inject"
    data: InjectData


class ErrorEvent(_Frame):
    """``event: error``."""

    event: Literal["error"] = "error"
    data: ErrorData


class WarningEvent(_Frame):
    """``event: warning``."""

    event: Literal["warning"] = "warning"
    data: WarningData


class ApprovalData(Payload):
    """A tool call that waits for a person (``requested``), or its decision."""

    status: str
    """``requested``, then ``approved``, ``edited``, ``rejected``, ``responded`` or ``expired``."""
    approval_id: str
    """The approval's id (``POST /v1/runs/{id}/approvals/{approval_id}`` decides it)."""
    tool_call_id: str
    """The call that waits."""
    tool_name: str | None = None
    """requested: the tool."""
    tool_args: Any = None
    """requested: the arguments as the model wrote them."""
    args_digest: str | None = None
    """requested: hex SHA-256 of the arguments as canonical JSON; a decision names it."""
    reason: str | None = None
    """requested: why it waits."""
    expires_at: float | None = None
    """requested: Unix time its ``on_timeout`` applies."""
    decided_by: str | None = None
    """A decision: who decided (``timeout`` for an expiry)."""
    approved_args: Any = None
    """edited: the arguments the call runs with."""


class ForkData(Payload):
    """A fork's first event: which run it was forked from."""

    forked_from: dict[str, Any]
    """``{run_id, turn}``: the parent run and the turn the fork starts with."""
    reuse: str
    """``effects``, ``all`` or ``none``: what happens to the parent's recorded calls made again."""


class ForkEvent(_Frame):
    """``event: fork``."""

    event: Literal["fork"] = "fork"
    data: ForkData


class ApprovalEvent(_Frame):
    """``event: approval``."""

    event: Literal["approval"] = "approval"
    data: ApprovalData


class DoneEvent(_Frame):
    """``event: done``: always last; the stream ends after it."""

    event: Literal["done"] = "done"
    data: DoneData


Event = Annotated[StepEvent | StepProgressEvent | AnswerEvent | CompactEvent | PhaseEvent | InjectEvent
                  | ErrorEvent | WarningEvent | ApprovalEvent | ForkEvent | DoneEvent, Field(discriminator="event")]
"""One SSE frame, told apart by its channel (``event``)."""

EventAdapter: TypeAdapter[Any] = TypeAdapter(Event)
"""Validates ``{"id", "event", "data"}`` (a parsed frame) into its ``Event`` model."""


def parse_event(event_id: str, channel: str, data: dict[str, Any]) -> Any:
    """The ``Event`` model of one frame."""
    return EventAdapter.validate_python({"id": event_id, "event": channel, "data": data})


def events_schema() -> dict[str, Any]:
    """The JSON Schema of ``Event`` (one frame), for the OpenAPI description of the SSE routes."""
    return EventAdapter.json_schema(ref_template="#/components/schemas/{model}")
