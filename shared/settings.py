"""Configuration from the environment (pydantic-settings).

Two groups, read once at the edge (worker start, CLI, gateway) and passed inward:

* ``Settings``: deployment (``REACTQ_*``, ``OPENAI_*``).
* ``EngineConfig``: the seed's loop constants, under the seed's own env var names
  (``REACT_CYCLE_DETECTION_THRESHOLD`` …). The engine never reads ``os.environ`` itself.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class EngineConfig(BaseSettings):
    """The ReAct loop's constants (SPEC §0.2); defaults are the seed's values."""

    max_iterations: int = Field(50, ge=1, le=200, validation_alias=AliasChoices(
        "REACTQ_MAX_ITERATIONS", "REACT_MAX_ITERATIONS"))
    max_tool_calls_per_turn: int = Field(16, ge=1, le=1000,
                                         validation_alias="REACTQ_MAX_TOOL_CALLS_PER_TURN")
    """Calls of one LLM reply that run; the rest get an error observation (issue 10)."""
    tool_selection_threshold: int = Field(12, ge=0, alias="REACT_TOOL_SELECTION_THRESHOLD")
    tool_selection_max: int = Field(6, ge=1, alias="REACT_TOOL_SELECTION_MAX")
    compact_catalog_desc_length: int = Field(80, ge=4, alias="COMPACT_CATALOG_DESC_LENGTH")
    self_reflection_interval: int = Field(6, ge=1, alias="REACT_SELF_REFLECTION_INTERVAL")
    cycle_detection_threshold: int = Field(3, ge=1, alias="REACT_CYCLE_DETECTION_THRESHOLD")
    completion_check_min_tools: int = Field(3, ge=1, alias="REACT_COMPLETION_CHECK_MIN_TOOLS")
    tool_obs_truncation: int = Field(2000, ge=1, alias="REACT_TOOL_OBS_TRUNCATION")
    context_budget: int = Field(32000, ge=100, alias="CONTEXT_GUARD_DEFAULT_BUDGET")
    max_message_chars: int = Field(50000, ge=100, alias="CONTEXT_GUARD_MAX_MSG_CHARS")
    keep_recent: int = Field(4, ge=1, alias="CONTEXT_GUARD_KEEP_RECENT")

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", frozen=True,
                                      populate_by_name=True)

    @classmethod
    def defaults(cls) -> EngineConfig:
        """The seed's values, without reading the environment (``EngineConfig()`` reads it:
        that is for the edge; the engine's own default must not). Every default is a valid
        value, so nothing is left to validate."""
        return cls.model_construct()


class Settings(BaseSettings):
    """Deployment settings. ``redis_url=None`` means: start the embedded Valkey server."""

    model_config = SettingsConfigDict(env_prefix="REACTQ_", extra="ignore", frozen=True,
                                      populate_by_name=True)

    redis_url: str | None = None
    broker_url: str | None = None
    # Scale-out (see deploy/README.md): a Redis Cluster for state, TLS and ACL credentials.
    redis_cluster: bool = False
    redis_ca_file: Path | None = None
    redis_username: str | None = None
    redis_password: SecretStr | None = None
    key_prefix: str = "reactq:"
    models: Path | None = None
    model: str = "gpt-4o-mini"
    tools: str = ""
    hooks: str = ""
    tool_timeout: float = Field(60.0, gt=0, le=24 * 3600)
    """Deadline of a tool call whose tool sets no ``timeout`` (``REACTQ_TOOL_TIMEOUT``)."""
    demo_tools: bool = False
    """Register the demo/test tools ``echo``, ``add``, ``sleep`` (``REACTQ_DEMO_TOOLS``)."""
    data_dir: Path = Path(".reactq")
    run_ttl_seconds: int = Field(24 * 3600, ge=1)
    events_maxlen: int = Field(10_000, ge=100)
    lease_seconds: float = Field(3.0, gt=0)
    # Durability (workers/recovery/watchdog.py): work committed but not started within lease_seconds +
    # due_grace_seconds is sent again; a task whose holder died max_task_crashes times is not.
    due_grace_seconds: float = Field(2.0, gt=0)
    max_task_crashes: int = Field(3, ge=1)
    visibility_timeout: int = Field(3600, ge=10)
    api_token: SecretStr | None = None
    max_body_bytes: int = Field(1_000_000, ge=1024)
    max_interrupt_chars: int = Field(20_000, ge=1)
    """The longest follow-up message a run or DAG takes (422 above it)."""
    stall_seconds: float = Field(60.0, gt=0)
    """A run unchanged this long with no lease held is sent on again (``workers/recovery/sweeper.py``)."""
    max_interrupts: int = Field(100, ge=1)
    """Follow-ups per run or DAG (429 above it; the stream is capped at this length)."""
    flow_completion_estimate: int = Field(512, ge=1)
    """Tokens a call reserves for its completion when it sets no ``max_tokens``."""
    flow_inline_wait_s: float = Field(0.25, ge=0)
    """A wait for capacity up to this long is waited out in place; longer frees the slot."""
    openai_api_key: SecretStr | None = Field(None, validation_alias="OPENAI_API_KEY")
    openai_base_url: str | None = Field(None, validation_alias="OPENAI_BASE_URL")
    # Tools from MCP servers (path of a TOML file, see reactq.shared.tools.mcp.config).
    mcp: Path | None = None
    # http_fetch: hosts, host:port or CIDRs allowed past the SSRF guard; limits per fetch.
    http_fetch_allow: str = ""
    http_fetch_max_bytes: int = Field(2_000_000, ge=1024)
    http_fetch_timeout: float = Field(20.0, gt=0)
    sse_keepalive: float = Field(15.0, gt=0)
    """Seconds between keep-alive comments on an idle event stream (SSE)."""
    flower_url: str | None = None
    """Where the run viewer links to Flower (none: no link)."""
    # Webhooks (reactq.shared.webhooks): signing secret, retries, the SSRF guard's allowlist.
    webhook_secret: SecretStr | None = None
    """``whsec_<base64>``: the Standard Webhooks signing key (``REACTQ_WEBHOOK_SECRET``)."""
    webhook_allow: str = ""
    """Hosts, ``host:port``s or CIDRs a webhook may reach past the SSRF guard."""
    webhook_max_attempts: int = Field(8, ge=1, le=100)
    webhook_backoff_s: float = Field(1.0, gt=0, le=300)
    """Retry n waits this × 2^(n-1) seconds, capped at 300 s."""
    webhook_timeout_s: float = Field(10.0, gt=0, le=300)

    @property
    def due_seconds(self) -> float:
        """Committed work not taken up within this long is sent again (workers/recovery/watchdog.py)."""
        return self.lease_seconds + self.due_grace_seconds


class OtelSettings(BaseSettings):
    """OpenTelemetry's own variables, as its SDK names them (the ``otel`` extra)."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", frozen=True, populate_by_name=True)

    endpoint: str | None = Field(None, validation_alias="OTEL_EXPORTER_OTLP_ENDPOINT")
    """Traces are exported here (OTLP over HTTP); unset: no traces."""
    service_name: str = Field("reactq-worker", validation_alias="OTEL_SERVICE_NAME")
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
