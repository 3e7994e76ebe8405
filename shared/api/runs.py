"""Bodies of the run routes: ``/v1/runs``, ``/v1/runs/{id}``, its interrupts and cancel."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from reactq.shared.api.base import ApiModel

RunStatusName = Literal["queued", "running", "waiting", "succeeded", "failed", "cancelled"]

_RUN = "3f2b9c0e5d8a4b7c9e1f2a3b4c5d6e7f"


class RunCreated(ApiModel):
    """A run was accepted (202): it is queued, or was already there for this idempotency key."""

    model_config = ConfigDict(json_schema_extra={"examples": [{
        "run_id": _RUN, "events_url": f"/v1/runs/{_RUN}/events", "status_url": f"/v1/runs/{_RUN}",
        "created": True}]})

    run_id: str
    """The run's id."""
    events_url: str
    """Its server-sent event stream."""
    status_url: str
    """Its status."""
    created: bool
    """False when an earlier request with the same idempotency key created it."""
    injected: Literal[False] = False
    """Always false here: see ``ThreadInjected``."""


class ThreadInjected(ApiModel):
    """The thread's active run took the query as a follow-up (``multitask_strategy: inject``):
    no new run was created."""

    model_config = ConfigDict(json_schema_extra={"examples": [{
        "run_id": _RUN, "injected": True, "interrupt_id": "1733300000000-0",
        "events_url": f"/v1/runs/{_RUN}/events", "status_url": f"/v1/runs/{_RUN}", "created": False}]})

    run_id: str
    """The thread's active run, which took the query."""
    injected: Literal[True] = True
    """Always true: tells this reply from ``RunCreated``."""
    interrupt_id: str
    """The follow-up's id in the run's interrupt stream."""
    events_url: str
    """The active run's event stream."""
    status_url: str
    """The active run's status."""
    created: Literal[False] = False
    """Always false: no run was created."""


class RunResult(ApiModel):
    """How a run ended (the same figures as its ``done`` event)."""

    answer: str
    """The final answer (for a failed run, what went wrong)."""
    status: str
    """``succeeded``, ``failed`` or ``cancelled``."""
    iterations: int
    """ReAct turns taken (0 for a failed run)."""
    usage: dict[str, Any] = Field(default_factory=dict)
    """Tokens spent: ``prompt_tokens``, ``completion_tokens``, ``total_tokens``, …"""
    elapsed: float
    """Seconds from the first step to the end."""
    error: str | None = None
    """Why it failed, when it did."""
    mode: str | None = None
    """The tool-calling mode used (``json`` or ``native``)."""
    model: str | None = None
    """The registry name of the model that ran it."""


class ForkedFrom(ApiModel):
    """Which run a fork was made from, and its first turn."""

    run_id: str
    """The parent run."""
    turn: int
    """The parent's turn the fork started at (its first LLM call)."""


class RunStatus(ApiModel):
    """A run's status (``GET /v1/runs/{id}``)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{
        "run_id": _RUN, "status": "succeeded", "created_at": 1733300000.1, "updated_at": 1733300003.2,
        "events": 12, "result": {"answer": "391", "status": "succeeded", "iterations": 2,
                                 "usage": {"total_tokens": 812}, "elapsed": 3.1, "error": None,
                                 "mode": "native", "model": "general"}}]})

    run_id: str
    """The run's id."""
    status: RunStatusName
    """Where the run is."""
    created_at: float
    """Unix time it was accepted."""
    updated_at: float
    """Unix time of its last change."""
    events: int
    """Events published so far (the last ``seq``)."""
    result: RunResult | None = None
    """How it ended; null while it runs."""
    schedule_id: str | None = None
    """The schedule that started it."""
    scheduled_for: str | None = None
    """The schedule's tick it ran for (ISO-8601 UTC); none for a triggered run."""
    forked_from: ForkedFrom | None = None
    """The run it was forked from, and the turn it started at (a fork only)."""


class RunRow(ApiModel):
    """One run in a listing (``GET /v1/runs``, ``GET /v1/runs/{id}/summary``)."""

    run_id: str
    """The run's id."""
    status: RunStatusName
    """Where the run is."""
    model: str | None = None
    """The model asked for, or the one that ran it."""
    query: str
    """The start of its query (the whole query in ``/summary``)."""
    iterations: int = 0
    """ReAct turns taken once it ended."""
    usage: dict[str, Any] | None = None
    """Tokens spent once it ended."""
    created_at: float
    """Unix time it was accepted."""
    updated_at: float
    """Unix time of its last change."""
    batch_id: str | None = None
    """The HTTP batch it belongs to."""
    thread_id: str | None = None
    """The thread it belongs to."""
    schedule_id: str | None = None
    """The schedule that started it."""
    scheduled_for: str | None = None
    """The schedule's tick it ran for (ISO-8601 UTC); none for a triggered run."""
    forked_from: ForkedFrom | None = None
    """The run it was forked from, and the turn it started at (a fork only)."""


class RunPage(ApiModel):
    """A page of runs, newest first."""

    runs: list[RunRow]
    """The runs of this page."""
    next_cursor: str | None = None
    """Pass as ``cursor`` for the next page; null on the last one."""


class InterruptIn(ApiModel):
    """A follow-up message for a run or DAG."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"content": "Also say it in French."}]})

    content: str = Field(..., min_length=1, strict=True)
    """The message (at most ``REACTQ_MAX_INTERRUPT_CHARS`` characters)."""


class InterruptAccepted(ApiModel):
    """A follow-up was queued for the run or DAG (taken in at its next step boundary)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"interrupt_id": "1733300000000-0"}]})

    interrupt_id: str
    """The follow-up's id in the interrupt stream."""


class RunCancelling(ApiModel):
    """A cancel was accepted (202): the run ends ``cancelled`` at its next step boundary."""

    run_id: str
    """The run's id."""
    status: RunStatusName
    """Its status when the cancel was recorded."""
