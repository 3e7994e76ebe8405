"""``@reactq.hook``: a :class:`~reactq.shared.hooks.Hook` from a function.

::

    @reactq.hook("pre_tool_use", tools="send_*", priority=10)
    def no_big_invoices(ctx: reactq.HookContext) -> reactq.HookResult:
        if ctx.tool_args and ctx.tool_args.get("amount", 0) > 1000:
            return reactq.HookResult(allow=False, error="amounts over 1000 need a human")
        return reactq.HookResult()

The point is a :class:`~reactq.shared.hooks.HookPoint` or its value (``"pre_tool_use"``,
``"post_tool_use"``, ``"session_start"``; the spellings ``"PreToolUse"``,
``"PostToolUse"``, ``"SessionStart"`` are accepted too). ``tools`` is an fnmatch glob on the
tool name (``"crm__*"`` for every tool of the MCP server ``crm``). The handler may be sync or
async and returns a :class:`~reactq.shared.hooks.HookResult` (``None`` means no opinion).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from reactq.shared.hooks.base import Hook, HookPoint

__all__ = ["hook", "hook_point"]

_SEED_NAMES = {"pretooluse": HookPoint.PRE_TOOL_USE, "posttooluse": HookPoint.POST_TOOL_USE,
               "sessionstart": HookPoint.SESSION_START}


def hook_point(point: HookPoint | str) -> HookPoint:
    """``point`` as a ``HookPoint``; an unknown name is a ValueError listing the valid ones."""
    if isinstance(point, HookPoint):
        return point
    key = point.strip().lower()
    try:
        return HookPoint(key)
    except ValueError:
        found = _SEED_NAMES.get(key.replace("_", ""))
        if found is None:
            raise ValueError(f"unknown hook point {point!r}; use one of "
                             f"{[p.value for p in HookPoint]}") from None
        return found


def hook(
    point: HookPoint | str = HookPoint.PRE_TOOL_USE,
    *,
    name: str | None = None,
    tools: str | None = None,
    priority: int = 0,
    description: str | None = None,
    may_ask: bool = True,
) -> Callable[[Callable[..., Any]], Hook]:
    """Decorator: the function becomes the handler of a ``Hook`` at ``point``. ``may_ask=False``:
    a PreToolUse hook that never asks for approval (``Hook.may_ask``)."""
    where = hook_point(point)

    def wrap(fn: Callable[..., Any]) -> Hook:
        return Hook(name=name or fn.__name__, hook_point=where, handler=fn, priority=priority,
                    tool_filter=tools, may_ask=may_ask,
                    description=(description or inspect.getdoc(fn) or "").strip())

    return wrap
