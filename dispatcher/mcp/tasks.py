"""MCP tasks over reactq runs: a task is a run, its state the run's, in Redis.

The installed ``mcp`` package (2.x) carries no task runtime: it keeps the task types of the
protocol's first tasks design (``mcp_types``: ``Task``, ``CreateTaskResult``,
``GetTaskRequestParams`` …) and lets a server add methods and wrap ``tools/call`` through an
extension. ``RunTasks`` is that extension, advertised as ``io.modelcontextprotocol/tasks``:

* a ``tools/call`` of ``reactq_run`` whose params carry ``task`` (``{ttl?}``) makes the run and
  answers at once ``{resultType: "task", task: {taskId: <run id>, status: "working", …}}`` —
  on a connection of the current (handshake-free) revision, the ``mcp`` client's default; a
  handshake-era connection cannot carry that answer in this SDK, so there such a call is
  refused with ``INVALID_PARAMS``;
* ``tasks/get`` → the task: ``working`` (queued, running), ``input_required`` (an approval of
  the run waits for a person; ``statusMessage`` names it), ``completed``, ``failed``,
  ``cancelled``; ``tasks/result`` → the tool result (waiting for the run's end);
  ``tasks/cancel`` cancels the run; ``tasks/list`` lists the caller's tasks, newest first.

Any replica answers any task: everything is read from the run. Another tenant's task id is
``INVALID_PARAMS`` "no task", exactly as an id that never existed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, INVALID_REQUEST
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from reactq.dispatcher.mcp.calls import TOOL, Access, caller_of_context, result_of, start_run
from reactq.dispatcher.protocols.runview import RunView, Snapshot
from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.errors import RunNotFound
from reactq.shared.stores.keys import Caller

__all__ = ["RunTasks", "task_status"]

IDENTIFIER = "io.modelcontextprotocol/tasks"
POLL_MS = 500
PAGE = 50
STATUS = {"queued": "working", "running": "working", "waiting": "input_required", "succeeded": "completed",
          "failed": "failed", "cancelled": "cancelled"}


def task_status(run_status: str) -> str:
    return STATUS.get(run_status, "working")


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat().replace("+00:00", "Z")


class RunTasks(Extension):
    """The tasks extension: ``tools/call`` with ``task`` → a run; ``tasks/*`` read and act on it."""

    identifier = IDENTIFIER

    def __init__(self, access: Access, default_caller: Caller) -> None:
        self.access = access
        self.default_caller = default_caller

    def settings(self) -> dict[str, Any]:
        return {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}

    def methods(self) -> Sequence[MethodBinding]:
        return [MethodBinding("tasks/get", types.GetTaskRequestParams, self._get),
                MethodBinding("tasks/result", types.GetTaskPayloadRequestParams, self._result),
                MethodBinding("tasks/cancel", types.CancelTaskRequestParams, self._cancel),
                MethodBinding("tasks/list", types.PaginatedRequestParams, self._list)]

    def _caller(self, ctx: ServerRequestContext[Any, Any], scope: str = "runs:read") -> Caller:
        """The request's caller, if its key has ``scope`` (``INVALID_REQUEST`` naming it otherwise)."""
        caller = caller_of_context(Context(request_context=ctx), self.default_caller)
        if not caller.may(scope):
            raise MCPError(code=INVALID_REQUEST, message=f"this API key lacks the scope {scope!r}")
        return caller

    async def intercept_tool_call(self, params: types.CallToolRequestParams, ctx: ServerRequestContext[Any, Any],
                                  call_next: CallNext) -> HandlerResult:
        if params.task is None or params.name != TOOL:
            return await call_next(ctx)
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            raise MCPError(code=INVALID_PARAMS, message="a task-augmented reactq_run needs a connection of the current protocol "
                                                        "revision (this server answers tasks only there)")
        view, caller = self.access(), self._caller(ctx, "runs:write")
        try:
            run_id = await start_run(view, caller, dict(params.arguments or {}))
        except ToolError as exc:  # refused at the door: an error result, as for a plain call
            return types.CallToolResult(content=[types.TextContent(type="text", text=str(exc))], is_error=True)
        ttl = view.d.settings.run_ttl_seconds
        key = view.d.keys.mcp_tasks(caller.tenant)
        pipe = view.ar.pipeline(transaction=False)
        pipe.zadd(key, {run_id: time.time()})
        pipe.expire(key, ttl)
        await pipe.execute()
        snap = await view.snapshot(run_id)
        return {"resultType": "task", "task": self._task(view, snap).model_dump(by_alias=True, mode="json")}

    def _task(self, view: RunView, snap: Snapshot, message: str | None = None) -> types.Task:
        status = task_status(snap.status)
        return types.Task(task_id=snap.run_id, status=status, status_message=message,  # type: ignore[arg-type]
                          created_at=_iso(snap.created_at), last_updated_at=_iso(snap.updated_at or snap.created_at),
                          ttl=view.d.settings.run_ttl_seconds * 1000,
                          poll_interval=None if status in ("completed", "failed", "cancelled") else POLL_MS)

    async def _snapshot(self, ctx: ServerRequestContext[Any, Any], task_id: str,
                        scope: str = "runs:read") -> tuple[RunView, Snapshot]:
        view = self.access()
        if not await view.visible(task_id, self._caller(ctx, scope)):
            raise MCPError(code=INVALID_PARAMS, message=f"no task {task_id!r} (it may have expired)")
        try:
            return view, await view.snapshot(task_id)
        except RunNotFound:
            raise MCPError(code=INVALID_PARAMS, message=f"no task {task_id!r} (it may have expired)") from None

    async def _message(self, view: RunView, snap: Snapshot) -> str | None:
        if snap.status != "waiting":
            return None
        pending = [a for a in await view.approvals(snap.run_id) if a.get("status") == "pending"]
        if not pending:
            return None
        names = ", ".join(f"{a['tool_name']} (approval {a['approval_id']})" for a in pending)
        return f"waiting for a person to decide: {names}"

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: types.GetTaskRequestParams) -> HandlerResult:
        view, snap = await self._snapshot(ctx, params.task_id)
        task = self._task(view, snap, await self._message(view, snap))
        return types.GetTaskResult(**task.model_dump())

    async def _result(self, ctx: ServerRequestContext[Any, Any],
                      params: types.GetTaskPayloadRequestParams) -> HandlerResult:
        view, snap = await self._snapshot(ctx, params.task_id)
        if snap.status not in TERMINAL_STATUSES:
            snap = await view.wait(snap.run_id, ())
        out = result_of(snap).model_dump(by_alias=True, mode="json", exclude_none=True)
        out["_meta"] = {"io.modelcontextprotocol/related-task": {"taskId": snap.run_id}}
        return out

    async def _cancel(self, ctx: ServerRequestContext[Any, Any],
                      params: types.CancelTaskRequestParams) -> HandlerResult:
        view, snap = await self._snapshot(ctx, params.task_id, "runs:write")
        if snap.status in TERMINAL_STATUSES:
            raise MCPError(code=INVALID_PARAMS, message=f"task {snap.run_id} has already ended ({snap.status})")
        await view.cancel(snap.run_id)
        snap = await view.wait(snap.run_id, (), timeout=5.0)
        return types.CancelTaskResult(**self._task(view, snap).model_dump())

    async def _list(self, ctx: ServerRequestContext[Any, Any],
                    params: types.PaginatedRequestParams | None) -> HandlerResult:
        view, caller = self.access(), self._caller(ctx)
        start = int(params.cursor) if params is not None and params.cursor and params.cursor.isdigit() else 0
        key = view.d.keys.mcp_tasks(caller.tenant)
        ids = [i.decode() if isinstance(i, bytes) else str(i) for i in
               await view.ar.zrevrange(key, start, start + PAGE - 1)]
        tasks, gone = [], []
        for run_id in ids:
            try:
                tasks.append(self._task(view, await view.snapshot(run_id)))
            except RunNotFound:
                gone.append(run_id)
        if gone:
            await view.ar.zrem(key, *gone)
        more = len(ids) == PAGE
        return types.ListTasksResult(tasks=tasks, next_cursor=str(start + PAGE) if more else None)
