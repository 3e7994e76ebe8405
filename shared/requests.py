"""Requests accepted at the door: ``RunRequest`` and ``DagRequest``.

Validation happens here, before anything is enqueued; errors name the field and the limit.
Checks that need the registries (unknown model or tool names) are in ``check_run_request``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator

from reactq.shared.engine.approval import ApprovalPolicy
from reactq.shared.engine.output import check_schema
from reactq.shared.errors import RequestError

Mode = Literal["auto", "json", "native"]
MultitaskStrategy = Literal["inject", "enqueue", "reject", "interrupt", "rollback"]
#: A thread id is also a Redis Cluster hash tag (``reactq:thread:{id}``): no braces in it.
THREAD_ID_PATTERN = r"^[A-Za-z0-9._:-]+$"
ModelHint = Literal["fast", "reasoning"]
Priority = Literal["interactive", "batch"]


WebhookEvent = Literal["done", "approval.requested"]


def _done_only() -> list[WebhookEvent]:
    return ["done"]


class WebhookSpec(BaseModel):
    """Where to POST the signed message when the run, DAG or batch ends (``events``:
    ``done``, and ``approval.requested`` when a call waits for a person)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(..., min_length=1, max_length=2048)
    events: list[WebhookEvent] = Field(default_factory=_done_only, min_length=1, max_length=2)

    @field_validator("url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        scheme, sep, rest = v.partition("://")
        if not sep or scheme.lower() not in ("http", "https") or not rest.split("/", 1)[0]:
            raise ValueError("must be an http:// or https:// URL with a host")
        return v

    def wants(self, event: str) -> bool:
        return event in self.events


class RunRequest(BaseModel):
    """One agent run."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, json_schema_extra={"examples": [
        {"query": "what is 17*23?"},
        {"query": "summarise the open issues", "tools": ["http_fetch"], "max_iterations": 10,
         "thread_id": "support-42", "metadata": {"org": "acme"}}]})

    query: str = Field(..., min_length=1, max_length=100_000)
    """What the agent is asked (not only whitespace)."""
    model: str | None = None
    """A model of the registry (``GET /v1/models``); None: the default."""
    tools: list[str] | None = None
    """The tools the run may use (``GET /v1/tools``); None: all of them."""
    mode: Mode = "auto"
    """Tool calling: ``native`` function calls, ``json`` replies, or ``auto`` (what the model supports)."""
    # Strict: ``true`` or ``"5"`` is a client's mistake, not an iteration count.
    max_iterations: StrictInt | None = Field(None, ge=1, le=200)
    """None: ``REACTQ_MAX_ITERATIONS`` (50)."""
    completion_check: StrictBool = True
    """Ask the model, before it answers after several tool calls, whether the task is done."""
    system_prompt: str | None = Field(None, max_length=100_000)
    """Replaces the default system prompt."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form; hooks see it as ``ctx.metadata``."""
    idempotency_key: str | None = Field(None, min_length=1, max_length=200)
    """A retry with the same key answers the first run (``created: false``) instead of a new one."""
    thread_id: str | None = Field(None, min_length=1, max_length=200, pattern=THREAD_ID_PATTERN)
    """Runs with one thread id share a conversation."""
    multitask_strategy: MultitaskStrategy = "inject"
    """What this run does while another run of its thread is active."""
    priority: Priority = "interactive"
    """Who gets a rate-limited model's capacity first (batch lines default to ``batch``)."""
    token_budget: int | None = Field(None, ge=1)
    """The run's cap on LLM tokens (every call paid); reached ⇒ the max-iterations summary."""
    approval: ApprovalPolicy | None = None
    """Which of the run's calls wait for a person (adds to the tools' ``requires_approval``)."""
    cost_budget_usd: float | None = Field(None, gt=0, le=1_000_000)
    """The run's cap in US dollars (every call priced); reached ⇒ the summary path. Its
    model must have a price (else 422 at the door)."""
    output_schema: dict[str, Any] | None = None
    """A JSON Schema (draft 2020-12, at most 64 KB): the answer is then JSON valid against it."""
    webhook: WebhookSpec | None = None
    """POST a signed ``run.done`` message to this URL when the run ends."""

    @field_validator("output_schema")
    @classmethod
    def _schema(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if v is None else check_schema(v)

    @field_validator("query")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("query must contain non-whitespace characters")
        return v


class PlanStepIn(BaseModel):
    """One step of a plan given with a DAG."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    id: str = Field(..., min_length=1, max_length=100)
    """The step's id, named by other steps' ``dependencies``."""
    task: str = Field(..., min_length=1, max_length=20_000)
    """What the step's child run is asked."""
    dependencies: list[str] = Field(default_factory=list)
    """Steps whose results this one needs (no cycles)."""
    tool_hint: str | None = None
    """A tool the step will likely need."""
    model_hint: ModelHint | None = None
    """``fast`` or ``reasoning``: the registry role of the step's model."""


class DagRequest(BaseModel):
    """A goal, optionally with a user-supplied plan."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, json_schema_extra={"examples": [
        {"goal": "compare the populations of France and Spain"},
        {"goal": "g", "steps": [{"id": "a", "task": "find x"}, {"id": "b", "task": "use x", "dependencies": ["a"]}]}]})

    goal: str = Field(..., min_length=1, max_length=100_000)
    """What the DAG is to achieve."""
    steps: list[PlanStepIn] | None = Field(None, max_length=100)
    """A plan; None: the planner plans."""
    model: str | None = None
    """The planner's, analyzer's and synthesis' model; None: the default."""
    tools: list[str] | None = None
    """The tools the steps may use; None: all of them."""
    max_concurrency: StrictInt = Field(5, ge=1, le=50)
    """Steps running at once at most."""
    max_rounds: StrictInt = Field(3, ge=1, le=5)
    """Plan–execute–analyze rounds at most."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form; passed to the steps' runs."""
    idempotency_key: str | None = Field(None, min_length=1, max_length=200)
    """A retry with the same key answers the first DAG instead of a new one."""
    output_schema: dict[str, Any] | None = None
    """A JSON Schema (as for runs) for the DAG's final answer."""
    webhook: WebhookSpec | None = None
    """POST a signed ``dag.done`` message to this URL when the DAG ends."""

    @field_validator("output_schema")
    @classmethod
    def _schema(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if v is None else check_schema(v)


def check_names(field: str, names: list[str] | None, known: list[str], what: str) -> None:
    """Refuse names that are not registered, naming the field and what is available."""
    if names is None:
        return
    unknown = [n for n in names if n not in known]
    if unknown:
        raise RequestError(
            f"{field}: unknown {what} {unknown}; available: {sorted(known)}", field=field
        )


def check_run_request(req: RunRequest, *, tools: list[str], models: list[str]) -> None:
    """The registry-dependent part of validation (unknown tool or model names)."""
    check_names("tools", req.tools, tools, "tool names")
    if req.approval is not None and isinstance(req.approval.tools, list):
        check_names("approval.tools", req.approval.tools, tools, "tool names")
    if req.model is not None:
        check_names("model", [req.model], models, "model")
