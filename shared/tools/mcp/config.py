"""The ``REACTQ_MCP`` file: which MCP servers a worker connects to.

A TOML file with one table per server::

    [servers.files]                 # stdio: reactq starts the command, one per worker process
    command = "uvx"
    args = ["mcp-server-filesystem", "/srv/data"]
    env = { LOG_LEVEL = "warning" }  # extra environment for the server process
    timeout = 30                    # seconds per call (default 60)

    [servers.crm]                   # streamable HTTP
    url = "https://mcp.example.com/mcp"
    headers = { "X-Tenant" = "acme" }                  # sent as written
    headers_from_env = { Authorization = "CRM_AUTH" }  # value read from $CRM_AUTH at connect

Secrets belong in ``headers_from_env``: the file names the variable, never the value, and the
value is read only when the worker connects (it never reaches events, logs or the catalog).
The server's tools appear as ``NAME__tool`` (``files__read_file``); ``NAME`` is the table name
and must match ``[A-Za-z0-9_-]+`` without a double underscore.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from reactq.shared.errors import ConfigError
from reactq.shared.settings import env_value

__all__ = ["McpServerConfig", "load_mcp_config", "SEPARATOR"]

SEPARATOR = "__"
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


class McpServerConfig(BaseModel):
    """One ``[servers.NAME]`` table: either ``command`` (stdio) or ``url`` (streamable HTTP)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    headers_from_env: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(60.0, gt=0)
    connect_timeout: float = Field(30.0, gt=0)
    approval: Literal["always", "writes", "never"] = "never"
    """Which of the server's tools wait for a person: every one, those without
    ``readOnlyHint``, or none."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if bool(self.command) == bool(self.url):
            raise ValueError("set exactly one of 'command' (stdio) or 'url' (streamable HTTP)")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError("'url' must start with http:// or https://")
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    def resolved_headers(self) -> dict[str, str]:
        """``headers`` plus ``headers_from_env`` read now; a missing variable is a ConfigError."""
        out = dict(self.headers)
        for header, var in self.headers_from_env.items():
            value = env_value(var)
            if value is None:
                raise ConfigError(
                    f"REACTQ_MCP server '{self.name}': header '{header}' needs the environment "
                    f"variable {var}, which is not set"
                )
            out[header] = value
        return out

    def public(self) -> dict[str, Any]:
        """What may be shown (catalog, logs): no env values, no header values."""
        return {"name": self.name, "transport": self.transport,
                "target": self.command if self.command else self.url}


def load_mcp_config(path: Path | str | None) -> list[McpServerConfig]:
    """The servers of the ``REACTQ_MCP`` file, in file order; ``None`` → none."""
    if path is None or str(path) == "":
        return []
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except OSError as exc:
        raise ConfigError(f"REACTQ_MCP: cannot read {p}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"REACTQ_MCP: {p} is not valid TOML: {exc}") from None
    servers = data.get("servers")
    if not isinstance(servers, dict) or not servers:
        raise ConfigError(f"REACTQ_MCP: {p} has no [servers.NAME] table")
    out: list[McpServerConfig] = []
    for name, table in servers.items():
        if not _NAME.match(name) or SEPARATOR in name:
            raise ConfigError(f"REACTQ_MCP: server name '{name}' must match [A-Za-z0-9_-]+ "
                              f"without '{SEPARATOR}'")
        if not isinstance(table, dict):
            raise ConfigError(f"REACTQ_MCP: servers.{name} must be a table")
        try:
            out.append(McpServerConfig(name=name, **table))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(x) for x in e['loc']) or name}: {e['msg']}" for e in exc.errors()
            )
            raise ConfigError(f"REACTQ_MCP: servers.{name}: {problems}") from None
    return out
