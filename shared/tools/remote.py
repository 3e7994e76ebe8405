"""A tool this worker lacks but another live worker offers: shown to the model with the
schema that worker announced (``reactq.shared.stores.toolsets``), never run here. Its calls
are tool tasks like any other, handed on to a worker that has it (``workers/runs/handon.py``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from reactq.shared.errors import ToolError
from reactq.shared.tools.base import Tool


class _AnyArgs(BaseModel):
    model_config = ConfigDict(extra="allow")


def remote_tool(entry: dict[str, Any]) -> Tool:
    """A stand-in for the tool of catalog entry ``entry`` (``GET /v1/tools``'s shape)."""
    name = str(entry["name"])

    def elsewhere(**_: Any) -> None:
        raise ToolError(f"Tool '{name}' runs on another worker")

    function = {"name": name, "description": entry.get("description", ""),
                "parameters": entry.get("parameters") or {"type": "object", "properties": {}}}
    return Tool(name=name, description=str(function["description"]), args_model=_AnyArgs, fn=elsewhere,
                idempotent=bool(entry.get("idempotent", True)), isolate=False,
                metadata={"_openai_schema": {"type": "function", "function": function}, "remote": True})
