"""What ``reactq_run`` does with a run, plain or as a task: the caller, the run's creation
through the one door, its progress and its tool result.

``reactq_run {query, model?, tools?, thread_id?, output_schema?, system_prompt?}``: a plain call
waits for the run and returns its answer as text (and ``structuredContent`` = the parsed
output when ``output_schema`` was given), sending a progress notification at each LLM turn;
a run that does not succeed is an error result naming its status and error. With the tasks
extension (``tasks.RunTasks``) a task-augmented call returns a task at once instead.

Who calls: over HTTP the gateway's caller (its bearer key's tenant and scopes); on stdio the
tenant the command was started for (an admin of it: the operator's own process).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ValidationError

from reactq.dispatcher.protocols.door import create_run
from reactq.dispatcher.protocols.runview import RunView, Snapshot
from reactq.dispatcher.threads import ThreadBusy
from reactq.shared.errors import RequestError
from reactq.shared.requests import RunRequest
from reactq.shared.stores.keys import OPEN_CALLER, Caller

__all__ = ["TOOL", "Access", "caller_of_context", "result_of", "start_run", "wait_reporting"]

TOOL = "reactq_run"
#: The reactq run views a server reads and acts through (made on the serving event loop).
Access = Callable[[], RunView]


def caller_of_context(ctx: Context[Any], default: Caller) -> Caller:
    """The caller of a request: the gateway's (HTTP, its key) or ``default`` (stdio)."""
    request = ctx.request_context.request
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict):
        found = (scope.get("state") or {}).get("caller")
        return found if isinstance(found, Caller) else OPEN_CALLER
    return default


def run_request(arguments: dict[str, Any]) -> RunRequest:
    """The run request of ``reactq_run``'s arguments (``ToolError`` naming a bad field)."""
    fields = {k: v for k, v in arguments.items() if v is not None}
    try:
        return RunRequest.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ToolError(f"{where}: {first['msg']}") from None


async def start_run(view: RunView, caller: Caller, arguments: dict[str, Any]) -> str:
    """Make the run of a ``reactq_run`` call (through the one door); its id."""
    try:
        handle = await create_run(view.d, run_request(arguments), caller)
    except (ThreadBusy, RequestError) as exc:
        raise ToolError(str(exc)) from None
    return handle.run_id


def result_of(snap: Snapshot) -> types.CallToolResult:
    """The tool result of an ended run."""
    result = snap.result or {}
    if snap.status != "succeeded":
        why = result.get("error") or f"the run ended {snap.status}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"run {snap.run_id} "
                                                               f"{snap.status}: {why}")], is_error=True)
    answer = str(result.get("answer") or "")
    structured = None
    if snap.request.get("output_schema") is not None and "output" in result:
        out = result["output"]
        structured = out if isinstance(out, dict) else {"value": out}
        answer = answer or json.dumps(out)
    return types.CallToolResult(content=[types.TextContent(type="text", text=answer)], structured_content=structured)


async def wait_reporting(view: RunView, run_id: str, ctx: Context[Any]) -> Snapshot:
    """Follow the run to its end, a progress notification at each LLM turn."""
    async for item in view.follow(run_id):
        if item is None:
            snap = await view.snapshot(run_id)
            if snap.ended:  # its done event was trimmed off the stream
                return snap
            continue
        data = item[1].data
        if item[1].channel == "step" and data.get("type") == "thinking" and data.get("status") == "start":
            turn = int(data.get("iteration") or 0)
            await ctx.report_progress(turn, None, f"turn {turn}")
        elif item[1].channel == "approval" and data.get("status") == "requested":
            await ctx.report_progress(float(item[1].seq), None,
                                      f"waiting for a person to approve {data.get('tool_name')}")
    return await view.wait(run_id, ())
