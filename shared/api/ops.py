"""Bodies of the operations, catalog, thread and viewer routes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from reactq.shared.api.base import ApiModel
from reactq.shared.api.errors import ErrorInfo


class Health(ApiModel):
    """Liveness: the gateway process and its event loop answer."""

    status: Literal["ok"] = "ok"
    """Always ``ok`` (a dead process does not answer)."""
    uptime_s: float
    """Seconds since the gateway started."""


class Readiness(ApiModel):
    """Readiness: can this gateway serve requests (Redis and the broker answer). Workers are
    reported, not required: reads of stored runs and new submissions (queued until a worker
    takes them) work without one."""

    status: Literal["ok", "unavailable"]
    """``ok`` (200) or ``unavailable`` (503)."""
    redis: str
    """``ok`` or what went wrong reaching Redis."""
    broker: str
    """``ok``, ``unknown`` (Redis is down) or what went wrong reaching the broker."""
    workers: list[str] = Field(default_factory=list)
    """Workers that answered a ping within a short wait (empty: none seen, or all busy)."""
    workers_error: str | None = None
    """Why the ping failed, if it did."""


class ToolEntry(ApiModel):
    """A tool the workers published (the catalog)."""

    name: str
    """The name a run's ``tools`` list uses."""
    description: str = ""
    """What it does."""
    parameters: dict[str, Any] = Field(default_factory=dict)
    """Its arguments' JSON Schema."""


class ToolCatalog(ApiModel):
    """The tools the workers published when they started."""

    tools: list[ToolEntry]
    """Every tool; MCP tools carry ``mcp_server``."""
    published: bool
    """False (and the list empty) before any worker has started."""


class ModelEntry(ApiModel):
    """A model of the registry the workers published (no secrets: ``api_key_env`` names the
    environment variable of its key)."""

    name: str
    """The registry name a run's ``model`` uses."""
    model: str | None = None
    """The provider's model id."""
    base_url: str | None = None
    """The endpoint, without credentials or query."""
    roles: list[str] = Field(default_factory=list)
    """Roles it serves (``general``, ``fast``, ``reasoning``, ``smart``)."""
    rpm: int | None = None
    """Cluster-wide requests per minute, if limited."""
    tpm: int | None = None
    """Cluster-wide tokens per minute, if limited."""
    max_concurrency: int | None = None
    """Calls in flight at most, if limited."""
    use: dict[str, Any] | None = None
    """With ``?use=true``: current use (last 60 s, in flight, waiting, paused)."""


class ModelCatalog(ApiModel):
    """The models the workers published when they started."""

    models: list[ModelEntry]
    """Every model of the registry."""
    published: bool
    """False (and the list empty) before any worker has started."""


class ThreadRun(ApiModel):
    """A run of a thread."""

    run_id: str
    """The run's id."""
    status: str
    """Its status (``expired`` once its record is gone)."""
    query: str
    """Its query."""
    created_at: float
    """Unix time it was accepted."""


class ThreadMessage(ApiModel):
    """A message of the thread's conversation."""

    role: str
    """``user``, ``assistant``, ``system`` or ``tool``."""
    content: str | None = None
    """Its text."""


class ThreadView(ApiModel):
    """A thread: its runs (oldest first), its active run, its conversation so far."""

    thread_id: str
    """The thread's id."""
    active_run: str | None = None
    """The run going on now, if any."""
    runs: list[ThreadRun]
    """Its runs, oldest first."""
    messages: list[ThreadMessage]
    """The conversation the thread's next run starts from."""


class UiConfig(ApiModel):
    """What the run viewer needs to know about this deployment (no secrets)."""

    flower_url: str | None = None
    """Flower's URL (``REACTQ_FLOWER_URL``), for links to tasks."""
    auth: bool
    """Whether the API needs a token."""


class FlowModels(ApiModel):
    """Each published model's limits and current use."""

    models: list[ModelEntry]
    """Every model, with ``use``."""


class NotReady(Readiness):
    """Readiness failed (503): the one error shape, with the readiness report beside it."""

    error: ErrorInfo
    """``unavailable``: what cannot be reached."""
