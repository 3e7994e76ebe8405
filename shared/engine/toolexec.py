"""Running one tool call: PreToolUse hooks → lookup → validated call → PostToolUse hooks.

Hooks run here, in the worker that executes the tool, outside anything the LLM controls
Errors never escape: they become the outcome's ``error``, except
cancellation, which propagates.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from reactq.shared.engine.state import ToolOutcome
from reactq.shared.errors import ToolError, ToolNotFound
from reactq.shared.hooks import HookContext, HookPoint, HookRegistry
from reactq.shared.models import ToolCallRequest, ToolResult
from reactq.shared.tools.base import ToolRegistry


async def execute_call(
    call: ToolCallRequest,
    *,
    registry: ToolRegistry,
    hooks: HookRegistry,
    run_id: str,
    metadata: dict[str, Any] | None = None,
    clock: Callable[[], float] = time.time,
    worker: str | None = None,
    approved: bool = False,
    on_start: Callable[[], Awaitable[None]] | None = None,
) -> ToolOutcome:
    """Execute ``call`` against ``registry`` (the run's effective tools). A PreToolUse hook
    that asks for approval stops an unapproved call before it runs: the outcome's ``ask`` is
    its reason. ``approved``: a person approved the call (``call.arguments`` are the approved
    ones); hooks still run and may still block it or rewrite its arguments. ``on_start``: awaited
    once the PreToolUse hooks let the call run, before the tool does (its live ``iteration
    start``, ``callevents``)."""
    started = clock()
    meta = {**(metadata or {}), "run_id": run_id, "tool_call_id": call.id,
            "requires_confirmation": _requires_confirmation(registry, call)}
    ctx = HookContext(hook_point=HookPoint.PRE_TOOL_USE, tool_name=call.name,
                      tool_args=dict(call.arguments), metadata=meta,
                      user_id=_str(meta.get("user_id")), conversation_id=run_id)
    out = ToolOutcome(tool_call_id=call.id, tool_name=call.name, started_at=started, worker=worker)
    pre = await hooks.run_pre_tool(ctx)
    out.side_effects += pre.side_effects
    if not pre.allow:
        out.error = pre.error or "Tool call blocked by hook"
        out.blocked = True
        out.ended_at = clock()
        return out
    if pre.ask and not approved:
        out.ask = pre.reason or "a hook asks for approval"
        return out
    args = pre.modified_args if pre.modified_args is not None else dict(call.arguments)
    if on_start is not None:
        await on_start()
    try:
        result = await registry.get(call.name).invoke(args, default_timeout=registry.default_timeout)
    except asyncio.CancelledError:
        raise
    except (ToolNotFound, ToolError) as exc:
        out.error = str(exc)
    except Exception as exc:  # The LLM sees the failure and may retry differently
        out.error = f"{type(exc).__name__}: {exc}"
    else:
        content = result.content if isinstance(result, ToolResult) else result
        if isinstance(result, ToolResult):
            out.content_type = result.content_type
            out.artifacts = list(result.artifacts)
        ctx.hook_point = HookPoint.POST_TOOL_USE
        ctx.tool_args = args
        ctx.tool_result = content
        post = await hooks.run_post_tool(ctx)
        out.side_effects += post.side_effects
        out.observation = post.modified_result if post.modified_result is not None else content
    out.ended_at = clock()
    return out


def _requires_confirmation(registry: ToolRegistry, call: ToolCallRequest) -> bool:
    """``requires_confirmation_for(args)`` when the tool has it, else the attribute."""
    if call.name not in registry:
        return False
    tool = registry.get(call.name)
    per_call = getattr(tool, "requires_confirmation_for", None)
    if callable(per_call):
        try:
            return bool(per_call(dict(call.arguments)))
        except Exception:  # a buggy check must not crash the run; ask for confirmation
            return True
    return bool(tool.requires_confirmation)


def _str(value: Any) -> str | None:
    return None if value is None else str(value)
