"""The fork requests and replies (``POST /v1/runs/{id}/fork``, ``/v1/batches/{id}/fork``,
``/v1/dags/{id}/fork``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from reactq.shared.api.base import ApiModel
from reactq.shared.api.runs import ForkedFrom
from reactq.shared.engine.fork import ForkEdit, Plan
from reactq.shared.engine.recorded import Reuse
from reactq.shared.requests import WebhookSpec

#: Where a fork starts: the turn whose LLM call ended the parent ``failed``, its last turn, or a turn (≥ 1).
FromSpec = Literal["last_failure", "last_turn"] | StrictInt


class ForkRequest(BaseModel):
    """``POST /v1/runs/{id}/fork``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, use_attribute_docstrings=True)

    from_: FromSpec = Field("last_failure", alias="from")
    """``last_failure`` (default), ``last_turn`` or a turn number (≥ 1): the fork's first turn."""
    edit: ForkEdit | None = None
    """A user message before the fork's first turn, one replaced observation of the turn before
    it, another model or system prompt from it on."""
    reuse: Reuse = "effects"
    """Which of the parent's recorded calls the fork reuses when its model makes them again."""
    dry_run: bool = False
    """Answer the plan only; nothing is created."""
    idempotency_key: str | None = Field(None, min_length=1, max_length=200)
    """The same key (per tenant) answers the same fork."""
    webhook: WebhookSpec | None = None
    """Where to POST ``run.done`` when the fork ends."""


class ForkCreated(ApiModel):
    """A fork was made (202), or would be (``dry_run``: 200, ``plan`` only)."""

    run_id: str | None = None
    """The fork's id (none for a dry run)."""
    forked_from: ForkedFrom | None = None
    """The parent run and the fork's first turn."""
    plan: Plan
    """What the fork keeps, and what each call the parent made from that turn on does if made again."""
    created: bool = True
    """False when an ``idempotency_key`` answered an existing fork."""


LineStatus = Literal["failed", "cancelled", "succeeded", "invalid", "skipped"]


def _failed_only() -> list[LineStatus]:
    return ["failed"]


class BatchForkRequest(BaseModel):
    """``POST /v1/batches/{id}/fork``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, use_attribute_docstrings=True)

    status: list[LineStatus] = Field(default_factory=_failed_only, min_length=1, max_length=5)
    """Lines whose status is one of these are forked; the others keep their run and result."""
    from_: FromSpec = Field("last_failure", alias="from")
    """Where each forked line's fork starts (a line whose run did not fail, with ``last_failure``:
    from its last turn)."""
    reuse: Reuse = "effects"
    edit: ForkEdit | None = None
    dry_run: bool = False
    """Answer the counts and each line's plan; nothing is created."""


class BatchForked(ApiModel):
    """A batch of forks (202), or what it would be (``dry_run``: 200)."""

    batch_id: str | None = None
    """The new batch (none for a dry run)."""
    forked_from: str
    """The batch it was forked from."""
    forked: int
    """Lines that are forks of their runs."""
    kept: int
    """Lines that keep their run and result."""
    plans: dict[str, Plan] | None = None
    """A dry run: each forked line's plan, by line id."""


class DagForkRequest(BaseModel):
    """``POST /v1/dags/{id}/fork``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, use_attribute_docstrings=True)

    from_: Literal["last_failure"] = Field("last_failure", alias="from")
    """Each failed step is forked from its run's last failure."""


class DagForked(ApiModel):
    """A DAG fork was made (202)."""

    dag_id: str
    """The new DAG."""
    forked_from: str
    """The DAG it was forked from."""
    kept: list[str] = Field(default_factory=list)
    """Steps whose results are kept."""
    rerun: list[str] = Field(default_factory=list)
    """Steps that run again (the failed ones as forks of their runs, and their dependants)."""
