"""MCP tools as reactq ``Tool``\\ s: ``NAME__tool``, schema passed through, results summarised.

:func:`mcp_tools` lists every configured server's tools (connecting to each, once per
process) and wraps each in an :class:`McpTool`. Its JSON schema goes to the LLM as the server
wrote it; arguments are checked against it with ``jsonschema`` before the call, so a bad
argument is an error observation naming the field, like a native tool's.

``idempotent`` follows MCP's annotation defaults (``readOnlyHint`` false, ``destructiveHint``
true, ``idempotentHint`` false): a read-only tool is idempotent; otherwise a tool is
idempotent only if it says ``idempotentHint: true`` and does not say ``destructiveHint: true``.
So a tool without annotations is never silently re-run after a worker crash.

A call's result becomes text: text blocks as they are, a text resource as its text under
its URI, and images, audio and binary resources as artifacts (name, MIME type, size) with a
one-line summary in the observation, never their bytes. ``isError`` results and an
unreachable server become :class:`~reactq.shared.errors.ToolError` (an error observation).
"""

from __future__ import annotations

import asyncio
import base64
import logging
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from mcp import MCPError
from mcp.types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    Tool as McpToolDef,
    ToolAnnotations,
)
from pydantic import BaseModel

from reactq.shared.errors import ToolError
from reactq.shared.models import Artifact, ToolResult
from reactq.shared.tools.base import DEFAULT_TOOL_TIMEOUT, Tool, ToolArgumentsError
from reactq.shared.tools.isolation import ToolTimeoutError
from reactq.shared.tools.mcp.config import SEPARATOR, McpServerConfig
from reactq.shared.tools.mcp.hub import McpHub, McpUnavailable, get_hub

__all__ = ["McpTool", "idempotent_from", "mcp_tools", "summarise_result"]

log = logging.getLogger(__name__)


class _AnyArgs(BaseModel):
    """Placeholder model: an MCP tool's arguments are checked against its JSON schema."""


@dataclass
class McpTool(Tool):
    """A tool of an MCP server, called through this process's :class:`McpHub`."""

    server: str = ""
    remote_name: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)
    servers: tuple[McpServerConfig, ...] = ()
    """Every configured server: the hub is looked up per call, so a forked process (Celery's
    prefork pool) gets sessions of its own instead of its parent's."""

    @property
    def hub(self) -> McpHub:
        return get_hub(list(self.servers))

    def parameters(self) -> dict[str, Any]:
        schema = {k: v for k, v in self.input_schema.items() if k != "title"}
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        return schema

    def validate_args(self, args: dict[str, Any]) -> BaseModel:
        problems = sorted(
            jsonschema.Draft202012Validator(self.parameters()).iter_errors(args),
            key=lambda e: list(e.absolute_path),
        )
        if problems:
            text = "; ".join(
                f"{'.'.join(str(p) for p in e.absolute_path) or '(arguments)'}: {e.message}"
                for e in problems
            )
            raise ToolArgumentsError(f"Invalid arguments for tool '{self.name}': {text}")
        return _AnyArgs()

    async def invoke(self, args: dict[str, Any], *,
                     default_timeout: float | None = None) -> str | ToolResult:
        self.validate_args(args)
        hub = self.hub
        timeout = self.timeout or default_timeout or DEFAULT_TOOL_TIMEOUT
        try:
            result = await asyncio.wait_for(hub.run_async(hub.call_tool(self.server, self.remote_name, args)),
                                            timeout)
        except TimeoutError:
            raise ToolTimeoutError(
                f"Tool '{self.name}' timed out after {timeout:g}s (MCP server '{self.server}' did not "
                "answer in time; its deadline: the tool's timeout, default REACTQ_TOOL_TIMEOUT)") from None
        except McpUnavailable as exc:
            raise ToolError(str(exc)) from None
        except MCPError as exc:
            raise ToolError(f"MCP server '{self.server}' refused the call: {exc}") from None
        return summarise_result(result)


def approval_from(policy: str, annotations: ToolAnnotations | None) -> bool:
    """A server's ``approval``: ``always``, ``writes`` (tools without ``readOnlyHint``), ``never``."""
    if policy == "writes":
        return not (annotations is not None and annotations.read_only_hint is True)
    return policy == "always"


def idempotent_from(annotations: ToolAnnotations | None) -> bool:
    """MCP's defaults: no hints → not idempotent (see the module docstring)."""
    if annotations is None:
        return False
    if annotations.read_only_hint:
        return True
    return bool(annotations.idempotent_hint) and annotations.destructive_hint is not True


def summarise_result(result: CallToolResult) -> str | ToolResult:
    """Text for the LLM; binary content as artifacts. ``isError`` raises ``ToolError``."""
    parts: list[str] = []
    artifacts: list[Artifact] = []
    for block in result.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ImageContent | AudioContent):
            kind = "image" if isinstance(block, ImageContent) else "audio"
            art = Artifact(name=f"{kind}-{len(artifacts) + 1}", mime_type=block.mime_type,
                           size=_b64_size(block.data))
            artifacts.append(art)
            parts.append(f"[{kind} artifact {art.name}: {art.mime_type}, {art.size} bytes]")
        elif isinstance(block, EmbeddedResource):
            res = block.resource
            if isinstance(res, TextResourceContents):
                parts.append(f"[resource {res.uri}]\n{res.text}")
            elif isinstance(res, BlobResourceContents):
                art = Artifact(name=str(res.uri).rsplit("/", 1)[-1] or str(res.uri), path=str(res.uri),
                               mime_type=res.mime_type or "application/octet-stream",
                               size=_b64_size(res.blob))
                artifacts.append(art)
                parts.append(f"[resource artifact {res.uri}: {art.mime_type}, {art.size} bytes]")
        elif isinstance(block, ResourceLink):
            parts.append(f"[resource link {block.uri}: {block.name}]")
    text = "\n".join(parts)
    if result.is_error:
        raise ToolError(text or "the MCP tool reported an error")
    if not parts and result.structured_content is not None:
        import json

        text = json.dumps(result.structured_content, ensure_ascii=False)
    return ToolResult(content=text, artifacts=artifacts) if artifacts else text


def _b64_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (ValueError, TypeError):
        return len(data)


def mcp_tools(servers: list[McpServerConfig], *, list_timeout: float | None = None) -> list[Tool]:
    """Every tool of every server, as ``NAME__tool``. A server that cannot be listed is
    logged and skipped: its tools are missing from this process's catalog until it restarts."""
    if not servers:
        return []
    hub = get_hub(servers)
    out: list[Tool] = []
    for cfg in servers:
        try:
            defs = hub.run_sync(hub.list_tools(cfg.name),
                                list_timeout or cfg.connect_timeout + cfg.timeout)
        except Exception as exc:
            log.warning("REACTQ_MCP: listing the tools of server '%s' failed: %s", cfg.name, exc)
            continue
        out.extend(_wrap(cfg, d, tuple(servers)) for d in defs)
    return out


def _wrap(cfg: McpServerConfig, d: McpToolDef, servers: tuple[McpServerConfig, ...]) -> McpTool:
    return McpTool(
        name=f"{cfg.name}{SEPARATOR}{d.name}",
        description=(d.description or d.title or d.name).strip(),
        args_model=_AnyArgs,
        fn=_never_called,
        idempotent=idempotent_from(d.annotations),
        requires_approval=approval_from(cfg.approval, d.annotations),
        isolate=False,  # remote: the call runs in its server; the worker keeps one session
        server=cfg.name,
        remote_name=d.name,
        input_schema=dict(d.input_schema or {}),
        servers=servers,
        metadata={"mcp_server": cfg.name},
    )


def _never_called(**_: Any) -> None:  # pragma: no cover - McpTool.invoke does the call
    raise RuntimeError("McpTool calls go through the hub")
