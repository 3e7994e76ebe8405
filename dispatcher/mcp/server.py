"""The MCP server: one tool, ``reactq_run``, that makes a reactq run and answers with it.

``reactq_run {query, model?, tools?, thread_id?, output_schema?, system_prompt?}``: a plain call
waits for the run and returns its answer as text (and ``structuredContent`` = the parsed
output when ``output_schema`` was given), sending a progress notification at each LLM turn;
a run that does not succeed is an error result naming its status and error. With the tasks
extension (``tasks.RunTasks``) a task-augmented call returns a task at once instead.

Who calls: over HTTP the gateway's caller (its bearer key's tenant and scopes); on stdio the
tenant the command was started for (an admin of it: the operator's own process).
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from reactq.dispatcher.mcp.calls import TOOL, Access, caller_of_context, result_of, start_run, wait_reporting
from reactq.dispatcher.mcp.tasks import RunTasks
from reactq.shared.stores.keys import OPEN_CALLER, Caller

__all__ = ["build_server"]

DESCRIPTION = ("Run a reactq agent (a ReAct loop on the cluster's workers, with its registered tools) on a "
               "question and return its answer. `output_schema` (a JSON Schema) makes the answer a JSON value "
               "valid against it (also given as structured content); `thread_id` continues a conversation.")


def build_server(access: Access, *, default_caller: Caller = OPEN_CALLER, tasks: bool = True) -> MCPServer:
    """The MCP server over the runs ``access`` reaches (with the tasks extension unless told not)."""
    server = MCPServer("reactq", instructions="Run reactq agents: call reactq_run with a question.",
                       extensions=[RunTasks(access, default_caller)] if tasks else None)

    @server.tool(name=TOOL, description=DESCRIPTION, structured_output=False)
    async def reactq_run(
        query: str = Field(..., description="the question"),
        model: str | None = Field(None, description="a model name from the registry (default: the registry's)"),
        tools: list[str] | None = Field(None, description="names of the tools the run may use (default: all)"),
        thread_id: str | None = Field(None, description="a conversation to continue (runs on it share history)"),
        output_schema: dict[str, Any] | None = Field(None, description="a JSON Schema the answer must be valid against"),
        system_prompt: str | None = Field(None, description="extra instructions"),
        ctx: Context[Any] | None = None,
    ) -> types.CallToolResult:
        assert ctx is not None
        view = access()
        run_id = await start_run(view, caller_of_context(ctx, default_caller), {
            "query": query, "model": model, "tools": tools, "thread_id": thread_id,
            "output_schema": output_schema, "system_prompt": system_prompt})
        return result_of(await wait_reporting(view, run_id, ctx))

    return server
