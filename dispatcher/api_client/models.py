"""What the HTTP client returns: pydantic models of the gateway's answers.

Every model keeps fields it does not declare (``extra="allow"``): a gateway newer than this
client may add fields, and they stay readable as attributes and in ``model_dump()``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: Statuses after which a run (or DAG) changes no more.
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class Run(_Model):
    """A run: what ``POST /v1/runs``, ``GET /v1/runs/{id}`` and cancel answer."""

    run_id: str
    """The run's id."""
    status: str | None = None
    """queued, running, waiting, succeeded, failed or cancelled."""
    created_at: float | str | None = None
    """Epoch seconds (an ISO-8601 text from gateways that answer so)."""
    updated_at: float | str | None = None
    events: int | None = None
    """Events the run has published so far."""
    result: dict[str, Any] | None = None
    """Once it ended: ``answer``, ``output``, ``iterations``, ``usage``, ``elapsed``, ``error``."""
    created: bool | None = None
    """On create: False when an idempotency key named an existing run."""
    injected: bool = False
    """On create with a thread's ``inject`` strategy: the query went into the active run."""
    interrupt_id: str | None = None
    events_url: str | None = None
    status_url: str | None = None

    @property
    def done(self) -> bool:
        return self.status in TERMINAL

    @property
    def answer(self) -> str | None:
        return None if self.result is None else self.result.get("answer")

    @property
    def output(self) -> Any:
        """The parsed answer of a run with an ``output_schema`` (else None)."""
        return None if self.result is None else self.result.get("output")


class RunRow(_Model):
    """One row of ``GET /v1/runs``."""

    run_id: str
    status: str | None = None
    model: str | None = None
    query: str | None = None
    """Its first 200 characters."""
    iterations: int | None = None
    usage: dict[str, Any] | None = None
    created_at: float | str | None = None
    updated_at: float | str | None = None
    batch_id: str | None = None
    thread_id: str | None = None


class Page(_Model):
    """A page of a listing; ``next_cursor`` is None on the last one."""

    next_cursor: str | None = None


class RunList(Page):
    runs: list[RunRow] = Field(default_factory=list)


class StreamEvent(_Model):
    """One server-sent event: ``event`` = the channel, ``data`` = its payload, ``id`` = the
    stream id (resume after it with ``last_event_id``)."""

    event: str
    data: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


class Interrupt(_Model):
    """A follow-up message taken for delivery."""

    interrupt_id: str

    @classmethod
    def parse(cls, body: dict[str, Any]) -> Interrupt:
        return cls.model_validate({**body, "interrupt_id": body.get("interrupt_id") or body.get("id")})


class Dag(_Model):
    """A DAG: what ``POST /v1/dags``, ``GET /v1/dags/{id}`` and cancel answer."""

    dag_id: str
    status: str | None = None
    phase: str | None = None
    round: int | None = None
    goal: str | None = None
    steps: list[dict[str, Any]] = Field(default_factory=list)
    """Each step's ``id``, ``task``, ``status``, ``run_id`` and ``result``."""
    answer: str | None = None
    output: Any = None
    """The parsed final answer of a DAG with an ``output_schema`` (else None)."""
    achieved: bool | None = None
    result: dict[str, Any] | None = None
    created: bool | None = None
    events_url: str | None = None
    status_url: str | None = None

    @property
    def done(self) -> bool:
        return self.status in TERMINAL


class DagList(Page):
    dags: list[Dag] = Field(default_factory=list)


class Batch(_Model):
    """An HTTP batch: progress, and its result lines when asked for."""

    batch_id: str
    status: str | None = None
    total: int | None = None
    done: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    invalid: Any = None
    """A count in a batch's progress; the refused lines (``{line, id, error}``) on create."""
    results: list[dict[str, Any]] | None = None


class BatchList(Page):
    batches: list[Batch] = Field(default_factory=list)


class Eval(_Model):
    """An eval: its counts and scores (``GET /v1/evals/{id}``), or its ids on create."""

    eval_id: str
    batch_id: str | None = None
    name: str | None = None
    status: str | None = None
    """running, done or cancelled."""
    total: int | None = None
    counts: dict[str, int] | None = None
    pass_rate: float | None = None
    """Cases that passed every evaluator that applies, of the cases that ran."""
    scores: dict[str, Any] | None = None
    """By evaluator: ``{pass_rate, mean, scored}``."""
    cost_usd: float | None = None
    judge_cost_usd: float | None = None
    """The judge's dollars, apart from the runs'."""
    latency_ms: dict[str, Any] | None = None
    invalid: list[dict[str, Any]] | None = None
    """On create: the cases refused (``{line, id, error}``)."""

    @property
    def done(self) -> bool:
        return self.status in ("done", "cancelled")


class EvalList(Page):
    evals: list[Eval] = Field(default_factory=list)


class EvalCases(Page):
    """A page of an eval's cases: ``{case_id, run_id, status, scores, answer, output, cost_usd, turns, …}``."""

    cases: list[dict[str, Any]] = Field(default_factory=list)


class EvalComparison(_Model):
    """Two evals compared: the cases that flipped, each changed case by evaluator, the deltas."""

    a: str
    b: str
    fixed: list[str] = Field(default_factory=list)
    broken: list[str] = Field(default_factory=list)
    cases: list[dict[str, Any]] = Field(default_factory=list)
    deltas: dict[str, Any] = Field(default_factory=dict)


class ThreadRun(_Model):
    run_id: str
    status: str | None = None
    query: str | None = None
    created_at: float | str | None = None


class Thread(_Model):
    """A thread: its runs (oldest first), its active run and the conversation so far."""

    thread_id: str
    active_run: str | None = None
    runs: list[ThreadRun] = Field(default_factory=list)
    messages: list[dict[str, Any]] = Field(default_factory=list)


class Approval(_Model):
    """A tool call waiting for (or given) a person's decision."""

    approval_id: str
    status: str | None = None
    run_id: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    tool_args: Any = None
    args_digest: str | None = None
    reason: str | None = None
    expires_at: Any = None


class ApprovalList(Page):
    approvals: list[Approval] = Field(default_factory=list)


class Schedule(_Model):
    """A schedule: a run made on a cron or an interval."""

    schedule_id: str
    next_fire_times: list[str] = Field(default_factory=list)


class ScheduleList(Page):
    schedules: list[Schedule] = Field(default_factory=list)


class ApiKey(_Model):
    """A scoped API key; ``key`` (the secret) is only in ``keys.create``'s answer."""

    key_id: str
    tenant: str | None = None
    scopes: list[str] = Field(default_factory=list)
    name: str | None = None
    key: str | None = None


class ApiKeyList(_Model):
    keys: list[ApiKey] = Field(default_factory=list)


__all__ = ["TERMINAL", "ApiKey", "ApiKeyList", "Approval", "ApprovalList", "Batch", "BatchList", "Dag",
           "Eval", "EvalCases", "EvalComparison", "EvalList",
           "DagList", "Interrupt", "Page", "Run", "RunList", "RunRow", "Schedule", "ScheduleList",
           "StreamEvent", "Thread", "ThreadRun"]


class Fork(_Model):
    """``POST /v1/runs/{id}/fork``: the fork (``run_id`` is None for a dry run) and its plan."""

    run_id: str | None = None
    forked_from: dict[str, Any] | None = None
    """``{run_id, turn}``: the parent and the fork's first turn."""
    plan: dict[str, Any] = Field(default_factory=dict)
    """``{turn, history_messages, calls: [{turn, tool_call_id, tool_name, args_digest, idempotent,
    ledger, if_repeated}]}``."""
    created: bool | None = None


class BatchFork(_Model):
    """``POST /v1/batches/{id}/fork``: the new batch (None for a dry run) and its counts."""

    batch_id: str | None = None
    forked_from: str | None = None
    forked: int = 0
    kept: int = 0
    plans: dict[str, Any] | None = None


class DagFork(_Model):
    """``POST /v1/dags/{id}/fork``: the new DAG, the steps it keeps and those it re-runs."""

    dag_id: str
    forked_from: str | None = None
    kept: list[str] = Field(default_factory=list)
    rerun: list[str] = Field(default_factory=list)
