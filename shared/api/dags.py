"""Bodies of the DAG and batch routes: ``/v1/dags…`` and ``/v1/batches…``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from reactq.shared.api.base import ApiModel

DagStatusName = Literal["queued", "running", "waiting", "succeeded", "failed", "cancelled"]
BatchStatusName = Literal["running", "done", "cancelled"]

_DAG = "9a8b7c6d5e4f30112233445566778899"


class DagCreated(ApiModel):
    """A DAG was accepted (202)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{
        "dag_id": _DAG, "events_url": f"/v1/dags/{_DAG}/events", "status_url": f"/v1/dags/{_DAG}",
        "created": True}]})

    dag_id: str
    """The DAG's id."""
    events_url: str
    """Its server-sent event stream."""
    status_url: str
    """Its status."""
    created: bool
    """False when an earlier request with the same idempotency key created it."""


class DagStep(ApiModel):
    """One step of the DAG's current round and its child run."""

    id: str
    """The step's id in the plan."""
    task: str
    """What the step does."""
    dependencies: list[str] = Field(default_factory=list)
    """Steps that finish before it starts."""
    status: str
    """``pending``, ``running``, ``completed``, ``failed`` or ``skipped``."""
    run_id: str | None = None
    """The child run executing it."""
    result: str | None = None
    """The child's answer, or why the step failed or was skipped."""


class DagStatus(ApiModel):
    """A DAG's status (``GET /v1/dags/{id}``)."""

    dag_id: str
    """The DAG's id."""
    status: DagStatusName
    """Where the DAG is."""
    phase: str
    """``planning``, ``executing``, ``analyzing``, ``synthesizing`` or ``done``."""
    round: int
    """The current round (re-planning starts another)."""
    goal: str | None = None
    """The goal it was given."""
    steps: list[DagStep]
    """The current round's steps."""
    answer: str | None = None
    """The final answer once done."""
    created_at: float
    """Unix time it was accepted."""
    updated_at: float
    """Unix time of its last change."""
    events: int
    """Events published so far."""
    result: dict[str, Any] | None = None
    """How it ended (the ``done`` event's payload)."""


class DagRow(ApiModel):
    """One DAG in a listing (``GET /v1/dags``)."""

    dag_id: str
    """The DAG's id."""
    status: DagStatusName
    """Where the DAG is."""
    phase: str | None = None
    """Its phase."""
    goal: str
    """The start of its goal."""
    created_at: float
    """Unix time it was accepted."""
    updated_at: float
    """Unix time of its last change."""


class DagPage(ApiModel):
    """A page of DAGs, newest first."""

    dags: list[DagRow]
    """The DAGs of this page."""
    next_cursor: str | None = None
    """Pass as ``cursor`` for the next page; null on the last one."""


class DagCancelling(ApiModel):
    """A cancel was accepted (202): running steps' child runs are cancelled, pending ones skipped."""

    dag_id: str
    """The DAG's id."""
    status: DagStatusName
    """Its status when the cancel was recorded."""


class BatchInvalidLine(ApiModel):
    """A line of the batch refused at the door (it ends ``invalid``; the others run)."""

    line: int
    """1-based line (or request) number."""
    id: str | int | None = None
    """The line's own ``id``, if it gave one (a string or a number, as sent)."""
    error: str | None = None
    """Why it was refused."""


class BatchCreated(ApiModel):
    """A batch was accepted (202) and is being driven."""

    batch_id: str
    """The batch's id."""
    status_url: str
    """Its progress."""
    total: int
    """Lines (requests) in it."""
    invalid: list[BatchInvalidLine]
    """Lines refused at the door."""


class BatchStatus(ApiModel):
    """A batch's progress (``GET /v1/batches/{id}``)."""

    batch_id: str
    """The batch's id."""
    status: BatchStatusName
    """``running``, ``done`` or ``cancelled``."""
    total: int
    """Lines in it."""
    done: int
    """Lines finished (succeeded + failed + invalid + skipped)."""
    succeeded: int
    """Runs that succeeded."""
    failed: int
    """Runs that failed or were cancelled."""
    invalid: int
    """Lines refused at the door."""
    running: int
    """Runs in flight."""
    waiting: int = 0
    """Of those, runs that wait for a person's decision on a tool call."""
    queued: int
    """Lines not started yet."""
    tokens: int
    """Tokens spent by its runs so far."""
    created_at: float
    """Unix time it was accepted."""
    updated_at: float
    """Unix time of its last change."""
    skipped: int | None = None
    """Lines not started because of its token budget or a cancel."""
    token_budget: int | None = None
    """Its cap on tokens."""
    stopped: str | None = None
    """Why lines were skipped."""
    results: list[dict[str, Any]] | None = None
    """The result lines, with ``?results=true``."""


class BatchRow(ApiModel):
    """One batch in a listing (``GET /v1/batches``)."""

    batch_id: str
    """The batch's id."""
    status: BatchStatusName
    """``running``, ``done`` or ``cancelled``."""
    total: int
    """Lines in it."""
    created_at: float
    """Unix time it was accepted."""
    updated_at: float
    """Unix time of its last change."""


class BatchPage(ApiModel):
    """A page of batches, newest first."""

    batches: list[BatchRow]
    """The batches of this page."""
    next_cursor: str | None = None
    """Pass as ``cursor`` for the next page; null on the last one."""


class BatchCancelling(ApiModel):
    """A cancel was accepted (202): the batch's runs are cancelled, lines not started skipped."""

    batch_id: str
    """The batch's id."""
    status: Literal["cancelling"] = "cancelling"
    """Always ``cancelling``; the batch ends ``cancelled``."""
