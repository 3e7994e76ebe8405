"""Configuration from the environment (pydantic-settings).

Two groups, read once at the edge (worker start, CLI, gateway) and passed inward:

* ``Settings``: deployment (``REACTQ_*``, ``OPENAI_*``).
* ``EngineConfig``: the ReAct loop's constants (``REACTQ_MAX_ITERATIONS`` …). The engine never
  reads ``os.environ`` itself.

Every setting is named ``REACTQ_*``. A few had older names (``REACT_*``, ``DAG_*``,
``CONTEXT_GUARD_*``, ``COMPACT_*``); they still work, with a ``DeprecationWarning``: a field
declared with ``renamed(NEW, OLD…)`` reads the new name first, then the old ones.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def user_data_dir() -> Path:
    """The per-user data folder (XDG): ``$XDG_DATA_HOME/reactq``, else ``~/.local/share/reactq``."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "reactq"


def renamed(new: str, *old: str) -> AliasChoices:
    """The environment names of a renamed setting: ``new`` first, then the deprecated ones."""
    return AliasChoices(new, *old)


def deprecated_names(cls: type[BaseSettings]) -> dict[str, str]:
    """Old environment name → its ``REACTQ_`` replacement, for every renamed field of ``cls``."""
    out: dict[str, str] = {}
    for field in cls.model_fields.values():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            names = [c for c in alias.choices if isinstance(c, str)]
            out.update({old: names[0] for old in names[1:]})
    return out


class RenamedSettings(BaseSettings):
    """Warns (``DeprecationWarning``) when a setting is given under a deprecated name."""

    @model_validator(mode="before")
    @classmethod
    def _warn_deprecated(cls, data: Any) -> Any:
        given = set(data) if isinstance(data, dict) else set()
        for old, new in deprecated_names(cls).items():
            if old in given or (old in os.environ and new not in os.environ):
                warnings.warn(f"{old} is deprecated and will be removed: set {new} instead",
                              DeprecationWarning, stacklevel=2)
        return data


class EngineConfig(RenamedSettings):
    """The ReAct loop's constants."""

    max_iterations: int = Field(50, ge=1, le=200, validation_alias=renamed(
        "REACTQ_MAX_ITERATIONS", "REACT_MAX_ITERATIONS"))
    """LLM turns a run may take before it is ended with a summary of what it found."""
    max_tool_calls_per_turn: int = Field(16, ge=1, le=1000,
                                         validation_alias="REACTQ_MAX_TOOL_CALLS_PER_TURN")
    """Calls of one LLM reply that run; the rest get an error observation."""
    output_repairs: int = Field(2, ge=0, le=10, validation_alias="REACTQ_OUTPUT_REPAIRS")
    """Re-asks of a typed answer (``output_schema``) that failed validation, with its errors."""
    tool_selection_threshold: int = Field(12, ge=0, validation_alias=renamed(
        "REACTQ_TOOL_SELECTION_THRESHOLD", "REACT_TOOL_SELECTION_THRESHOLD"))
    """With more tools than this, an LLM call first picks the ones the run may use."""
    tool_selection_max: int = Field(6, ge=1, validation_alias=renamed(
        "REACTQ_TOOL_SELECTION_MAX", "REACT_TOOL_SELECTION_MAX"))
    """The most tools that selection keeps."""
    compact_catalog_desc_length: int = Field(80, ge=4, validation_alias=renamed(
        "REACTQ_COMPACT_CATALOG_DESC_LENGTH", "COMPACT_CATALOG_DESC_LENGTH"))
    """Tool descriptions in the selection prompt's catalog are cut to this many characters."""
    self_reflection_interval: int = Field(6, ge=1, validation_alias=renamed(
        "REACTQ_SELF_REFLECTION_INTERVAL", "REACT_SELF_REFLECTION_INTERVAL"))
    """Every this many turns the model is asked to reflect on its progress."""
    cycle_detection_threshold: int = Field(3, ge=1, validation_alias=renamed(
        "REACTQ_CYCLE_DETECTION_THRESHOLD", "REACT_CYCLE_DETECTION_THRESHOLD"))
    """The same tool call with the same arguments this many times in a row draws a warning."""
    completion_check_min_tools: int = Field(3, ge=1, validation_alias=renamed(
        "REACTQ_COMPLETION_CHECK_MIN_TOOLS", "REACT_COMPLETION_CHECK_MIN_TOOLS"))
    """After this many tool calls a final answer is checked against the question's parts."""
    tool_obs_truncation: int = Field(2000, ge=1, validation_alias=renamed(
        "REACTQ_TOOL_OBS_TRUNCATION", "REACT_TOOL_OBS_TRUNCATION"))
    """A tool's observation is cut to this many characters in the conversation."""
    context_budget: int = Field(32000, ge=100, validation_alias=renamed(
        "REACTQ_CONTEXT_BUDGET", "CONTEXT_GUARD_DEFAULT_BUDGET"))
    """Tokens the conversation may fill before older turns are compacted (when the model's
    registry entry gives no ``context_size``)."""
    max_message_chars: int = Field(50000, ge=100, validation_alias=renamed(
        "REACTQ_MAX_MESSAGE_CHARS", "CONTEXT_GUARD_MAX_MSG_CHARS"))
    """One message longer than this is cut before it is sent to the model."""
    keep_recent: int = Field(4, ge=1, validation_alias=renamed(
        "REACTQ_KEEP_RECENT", "CONTEXT_GUARD_KEEP_RECENT"))
    """Compaction keeps this many recent messages as they are."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", frozen=True,
                                      populate_by_name=True)

    @classmethod
    def defaults(cls) -> EngineConfig:
        """The default values, without reading the environment (``EngineConfig()`` reads it:
        that is for the edge; the engine's own default must not). Every default is a valid
        value, so nothing is left to validate."""
        return cls.model_construct()


class Settings(BaseSettings):
    """Deployment settings. ``redis_url=None`` means: start the embedded Valkey server."""

    model_config = SettingsConfigDict(env_prefix="REACTQ_", extra="ignore", frozen=True,
                                      populate_by_name=True)

    redis_url: str | None = None
    """Redis for run state, event streams and (unless ``REACTQ_BROKER_URL`` is set) the Celery broker. Unset: the CLI's local commands start an embedded Valkey under ``REACTQ_DATA_DIR``; a ``Dispatcher`` refuses to start one."""
    broker_url: str | None = None
    """The Celery broker when it is not the Redis of ``REACTQ_REDIS_URL`` (e.g. ``amqp://…`` for RabbitMQ)."""
    # Scale-out (see deploy/README.md): a Redis Cluster for state, TLS and ACL credentials.
    redis_cluster: bool = False
    """State lives on a Redis Cluster (``REACTQ_REDIS_URL`` names one of its nodes)."""
    redis_ca_file: Path | None = None
    """CA bundle to verify a ``rediss://`` server's certificate."""
    redis_username: str | None = None
    """ACL user name for Redis (when not in the URL)."""
    redis_password: SecretStr | None = None
    """Password for Redis (when not in the URL)."""
    key_prefix: str = "reactq:"
    """Prefix of every Redis key reactq writes, so several deployments can share one Redis."""
    models: Path | None = None
    """Path of the model registry (TOML): named models, their roles, limits and prices. See the model-registry reference."""
    model: str = "gpt-4o-mini"
    """The model used when no registry is given (with ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``)."""
    tools: str = ""
    """Tools to load: comma-separated ``module:attr`` entries (a tool, a list of tools, a registry, or a factory)."""
    hooks: str = ""
    """Hooks to load: comma-separated ``module:attr`` entries, like ``REACTQ_TOOLS``."""
    tool_timeout: float = Field(60.0, gt=0, le=24 * 3600)
    """Deadline (seconds) of a tool call whose tool sets no ``timeout``."""
    demo_tools: bool = False
    """Register the demo tools ``echo``, ``add`` and ``sleep``."""
    data_dir: Path = Field(default_factory=lambda: user_data_dir())
    """Where the CLI's local conveniences keep the embedded Valkey's data, local workers' logs and
    the local model: per user, ``$XDG_DATA_HOME/reactq`` (``~/.local/share/reactq``) by default."""
    run_ttl_seconds: int = Field(24 * 3600, ge=1)
    """How long a finished run (its record, events and result) is kept in Redis."""
    events_maxlen: int = Field(10_000, ge=100)
    """The most events one run's stream keeps (older entries are trimmed)."""
    lease_seconds: float = Field(3.0, gt=0)
    """A worker holds a lease on the step it runs and renews it; a lease not renewed this long marks the step as orphaned."""
    due_grace_seconds: float = Field(2.0, gt=0)
    """Work committed but not started within ``lease_seconds`` + this is sent again."""
    max_task_crashes: int = Field(3, ge=1)
    """A step whose worker died this many times is failed instead of sent again (a poison pill)."""
    tool_unavailable_s: float = Field(30.0, ge=0)
    """A tool call whose tool no live worker offers (its worker is being replaced) waits this long
    for one, then is answered with an error (``error`` kind ``tool_unavailable``)."""
    metrics_flush_s: float = Field(1.0, ge=0)
    """Workers sum their best-effort counters (LLM calls, tokens, flow control) in memory and
    write them this often (``GET /metrics`` lags by at most this much; a crash loses at most
    this much of them); 0 writes them with the step's next round trip."""
    task_events: Literal["auto", "on", "off"] = "auto"
    """Celery task events (what Flower shows): ``auto`` sends them while a monitor asks for them
    (Flower asks every 5 s; they stop a minute after the last ask), ``on`` always (a monitor that
    asks once, such as ``celery events``), ``off`` never. Workers' heartbeats go out regardless."""
    visibility_timeout: int = Field(3600, ge=10)
    """The Redis broker's visibility timeout (seconds): an unacknowledged task is redelivered after it. Recovery does not wait for it."""
    worker_alive_file: Path | None = None
    """A worker touches this file when ready and every heartbeat (2 s): a liveness probe checks it is recent."""
    api_token: SecretStr | None = None
    """Bearer token the HTTP gateway requires on every route but ``/healthz`` and ``/readyz``
    (the ``admin`` key of tenant ``default``). Unset: the gateway is open."""
    tenants: Path | None = None
    """A TOML file of tenants' quotas: ``[tenants.NAME] max_active_runs, rpm, tpm,
    cost_per_day_usd`` (``reactq.shared.tenants.quotas``)."""
    max_body_bytes: int = Field(1_000_000, ge=1024)
    """The largest request body the gateway accepts (413 above it)."""
    max_interrupt_chars: int = Field(20_000, ge=1)
    """The longest follow-up message a run or DAG takes (422 above it)."""
    stall_seconds: float = Field(60.0, gt=0)
    """A run unchanged this long with no lease held is sent on again."""
    max_interrupts: int = Field(100, ge=1)
    """Follow-ups per run or DAG (429 above it; the stream is capped at this length)."""
    flow_completion_estimate: int = Field(512, ge=1)
    """Tokens a call reserves for its completion when it sets no ``max_tokens``."""
    flow_inline_wait_s: float = Field(0.25, ge=0)
    """A wait for capacity up to this long is waited out in place; longer frees the slot."""
    approval_timeout_s: int = Field(86_400, ge=1, le=30 * 24 * 3600)
    """How long an approval waits when the run's ``approval.timeout_s`` does not say."""
    evaluators: str = ""
    """Custom eval evaluators: comma-separated ``module:attr`` entries naming functions decorated
    with ``@reactq.evaluator`` (loaded where evals are scored: the gateway, ``reactq eval``)."""
    eval_ttl_s: int = Field(30 * 86_400, ge=60)
    """How long an eval's record and scores are kept (longer than its runs)."""
    connector_rate_limit: int = Field(10, ge=0, le=1_000_000)
    """The built-in ``rate_limiter`` hook: calls per connector tool (a ``server__tool`` name,
    e.g. every MCP tool) per ``connector_rate_window_s``, counted in each worker process;
    0 turns it off (``REACTQ_CONNECTOR_RATE_LIMIT``)."""
    connector_rate_window_s: float = Field(60.0, gt=0, le=86_400)
    """The window of ``connector_rate_limit`` in seconds (``REACTQ_CONNECTOR_RATE_WINDOW_S``)."""
    openai_api_key: SecretStr | None = Field(None, validation_alias="OPENAI_API_KEY")
    """API key of the OpenAI-compatible provider when no registry is given."""
    openai_base_url: str | None = Field(None, validation_alias="OPENAI_BASE_URL")
    """Base URL of the OpenAI-compatible provider when no registry is given."""
    # Tools from MCP servers (path of a TOML file, see reactq.shared.tools.mcp.config).
    mcp: Path | None = None
    """Path of a TOML file of MCP servers whose tools the workers offer."""
    # http_fetch: hosts, host:port or CIDRs allowed past the SSRF guard; limits per fetch.
    http_fetch_allow: str = ""
    """Comma-separated hosts, ``host:port`` or CIDRs that ``http_fetch`` may reach past its SSRF guard."""
    http_fetch_max_bytes: int = Field(2_000_000, ge=1024)
    """The most bytes ``http_fetch`` reads from one response."""
    http_fetch_timeout: float = Field(20.0, gt=0)
    """Seconds one ``http_fetch`` may take."""
    # Built-in guardrails (reactq.shared.hooks.guardrails); all off by default.
    guardrail_deny_words: str = ""
    """Comma-separated words that make ``query_tripwire`` refuse a query (whole word, any case)."""
    guardrail_deny_patterns: list[str] = Field(default_factory=list)
    """A JSON list of regular expressions that make ``query_tripwire`` refuse a query."""
    guardrail_pii: str = ""
    """Kinds ``pii_redactor`` redacts from answers: ``email,phone,card,iban`` or ``all``."""
    sse_keepalive: float = Field(15.0, gt=0)
    """Seconds between keep-alive comments on an idle event stream (SSE)."""
    flower_url: str | None = None
    """Where the run viewer links to Flower (none: no link)."""
    # Schedules (``reactq scheduler``): a tick missed while no scheduler ran fires once when
    # one returns if it is at most this old, else it is skipped and counted.
    schedule_catchup_s: float = Field(300.0, ge=0)
    scheduler_lock_timeout_s: float = Field(3.0, gt=0)
    """celery-redbeat's lock TTL: a standby takes over within about this plus the loop interval."""
    scheduler_loop_s: float = Field(1.0, gt=0, le=60)
    """The beat's longest sleep (``beat_max_loop_interval``); also how often a standby tries the lock."""
    # Webhooks (reactq.shared.webhooks): signing secret, retries, the SSRF guard's allowlist.
    webhook_secret: SecretStr | None = None
    """``whsec_<base64>``: the Standard Webhooks signing key (``REACTQ_WEBHOOK_SECRET``)."""
    webhook_allow: str = ""
    """Hosts, ``host:port``s or CIDRs a webhook may reach past the SSRF guard."""
    webhook_max_attempts: int = Field(8, ge=1, le=100)
    """Attempts of one delivery before it is given up as ``failed``."""
    webhook_backoff_s: float = Field(1.0, gt=0, le=300)
    """Retry n waits this × 2^(n-1) seconds, capped at 300 s."""
    webhook_timeout_s: float = Field(10.0, gt=0, le=300)
    """Seconds one delivery attempt may take (connect, send, answer) before it counts as failed."""

    @property
    def due_seconds(self) -> float:
        """Committed work not taken up within this long is sent again."""
        return self.lease_seconds + self.due_grace_seconds


class OtelSettings(BaseSettings):
    """OpenTelemetry's own variables, as its SDK names them (the ``otel`` extra)."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", frozen=True, populate_by_name=True)

    endpoint: str | None = Field(None, validation_alias="OTEL_EXPORTER_OTLP_ENDPOINT")
    """Traces are exported here (OTLP over HTTP); unset: no traces."""
    service_name: str = Field("reactq-worker", validation_alias="OTEL_SERVICE_NAME")
    """The service name on the traces."""
    capture_content: bool = Field(False, validation_alias="OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
    """Record prompts and completions on LLM spans (off: only sizes and token counts)."""


def env_value(name: str) -> str | None:
    """The environment variable ``name``, for a setting that names the variable holding a
    secret (a model registry's ``api_key_env``, an MCP server's ``headers_from_env``): read at
    the edge like every other setting, so the rest of the code never reads the environment."""
    return os.environ.get(name)


def environment() -> dict[str, str]:
    """A copy of this process's environment, for a child process to start from."""
    return dict(os.environ)


def child_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment for a process of ours started from this one (a worker, a gateway):
    this process's environment plus the settings it resolved on the way (the local model's
    registry, the demo tools) and ``extra``. Nothing is written into this process's own."""
    env = environment()
    if settings.models is not None:
        env["REACTQ_MODELS"] = str(settings.models)
    if settings.demo_tools:
        env["REACTQ_DEMO_TOOLS"] = "true"
    env.update(extra)
    return env
