"""Ready-made hooks: the upstream built-ins and two policy examples.

==========================  =====  ========  ==============================================
hook                        point  priority  what it does
==========================  =====  ========  ==============================================
``result_truncator``        POST   100       results > 8000 chars → first 8000 + a note
``rate_limiter``            PRE    0         ≤ 10 calls / 60 s per connector tool (``*__*``)
``connector_call_logger``   POST   0         logs each connector tool call (``*__*``)
``deny_tools(names)``       PRE    -100      blocks the named tools (fnmatch globs)
``read_only_mode()``        PRE    -100      blocks tools that look like they write
==========================  =====  ========  ==============================================

``result_truncator``, ``rate_limiter`` and ``connector_call_logger`` are module-level
instances; ``make_result_truncator``, ``make_rate_limiter`` build fresh ones with other
limits (and, for tests, another clock). :func:`builtin_hooks` returns fresh instances of
the three built-in hooks — what :func:`reactq.shared.hooks.loader.default_hooks` registers.

Workers build the rate limiter from ``REACTQ_CONNECTOR_RATE_LIMIT`` (calls, default 10; 0 turns
it off) and ``REACTQ_CONNECTOR_RATE_WINDOW_S`` (seconds, default 60). Its counters live in memory, so with Celery the limit holds **per worker
process**, not across the cluster. Connector tools are the ones whose name contains
``__`` (``github__create_issue``); others are never limited.

Example (``REACTQ_HOOKS="myapp.policy:HOOKS"``)::

    from reactq.shared.hooks.builtins import deny_tools, read_only_mode
    HOOKS = [deny_tools(["shell*", "github__delete_*"], reason="not in production"),
             read_only_mode()]
"""

from __future__ import annotations

import fnmatch
import logging
import math
import re
import time
from collections import deque
from collections.abc import Callable, Iterable

from reactq.shared.errors import ConfigError
from reactq.shared.hooks.base import Hook, HookContext, HookPoint, HookResult

__all__ = [
    "CONNECTOR_TOOLS",
    "DEFAULT_WRITE_VERBS",
    "builtin_hooks",
    "connector_call_logger",
    "deny_tools",
    "make_connector_call_logger",
    "make_rate_limiter",
    "make_result_truncator",
    "rate_limiter",
    "read_only_mode",
    "result_truncator",
]

log = logging.getLogger(__name__)

CONNECTOR_TOOLS = "*__*"
"""The glob that selects connector tools (``<connector>__<action>``)."""

# --------------------------------------------------------------------------- result_truncator


def make_result_truncator(max_chars: int = 8000, *, priority: int = 100) -> Hook:
    """A POST hook cutting results longer than ``max_chars``."""

    async def truncate(ctx: HookContext) -> HookResult:
        result = ctx.tool_result
        if result is None or len(result) <= max_chars:
            return HookResult()
        return HookResult(
            modified_result=(
                f"{result[:max_chars]}\n\n[truncated -- full output: {len(result)} chars]"
            )
        )

    return Hook(
        name="result_truncator",
        hook_point=HookPoint.POST_TOOL_USE,
        handler=truncate,
        description=f"Truncate tool results longer than {max_chars} characters.",
        priority=priority,
    )


# --------------------------------------------------------------------------- rate_limiter


class _SlidingWindow:
    """Timestamps of allowed calls per tool; a blocked call is not counted."""

    def __init__(self, max_calls: int, window: float, clock: Callable[[], float]) -> None:
        self.max_calls = max_calls
        self.window = window
        self.clock = clock
        self.calls: dict[str, deque[float]] = {}

    async def check(self, ctx: HookContext) -> HookResult:
        tool = ctx.tool_name or ""
        now = self.clock()
        calls = self.calls.setdefault(tool, deque())
        while calls and calls[0] <= now - self.window:
            calls.popleft()
        if len(calls) >= self.max_calls:
            wait = max(1, math.ceil(calls[0] + self.window - now))
            return HookResult(
                allow=False,
                error=(
                    f"Rate limit exceeded for '{tool}': max {self.max_calls} calls per "
                    f"{self.window:g}s. Try again in {wait}s."
                ),
            )
        calls.append(now)
        return HookResult()


def make_rate_limiter(
    max_calls: int = 10,
    window_seconds: float = 60.0,
    *,
    tool_filter: str | None = CONNECTOR_TOOLS,
    clock: Callable[[], float] = time.monotonic,
    priority: int = 0,
) -> Hook:
    """A PRE hook allowing at most ``max_calls`` per tool per ``window_seconds``."""
    if max_calls < 1 or window_seconds <= 0:
        raise ConfigError("rate_limiter: max_calls must be >= 1 and window_seconds > 0")
    limiter = _SlidingWindow(max_calls, window_seconds, clock)
    return Hook(
        name="rate_limiter",
        hook_point=HookPoint.PRE_TOOL_USE,
        handler=limiter.check,
        description=f"At most {max_calls} calls per {window_seconds:g}s per tool.",
        priority=priority,
        tool_filter=tool_filter,
        may_ask=False,
    )


# --------------------------------------------------------------------------- connector_call_logger


def make_connector_call_logger(*, tool_filter: str | None = CONNECTOR_TOOLS) -> Hook:
    """A POST hook logging connector calls (tool, run, result size); it changes nothing."""

    async def log_call(ctx: HookContext) -> HookResult:
        log.info(
            "connector call %s run=%s tool_call_id=%s result_chars=%d",
            ctx.tool_name,
            ctx.metadata.get("run_id"),
            ctx.metadata.get("tool_call_id"),
            len(ctx.tool_result or ""),
        )
        return HookResult()

    return Hook(
        name="connector_call_logger",
        hook_point=HookPoint.POST_TOOL_USE,
        handler=log_call,
        description="Log every connector tool call.",
        priority=0,
        tool_filter=tool_filter,
    )


result_truncator: Hook = make_result_truncator()
rate_limiter: Hook = make_rate_limiter()
connector_call_logger: Hook = make_connector_call_logger()


def builtin_hooks(*, rate_limit: int = 10, rate_window_s: float = 60.0) -> list[Hook]:
    """Fresh instances of the built-in hooks (a new rate-limit window each call): the rate
    limiter allows ``rate_limit`` calls per connector tool per ``rate_window_s``, and is left
    out when ``rate_limit`` is 0 (``REACTQ_CONNECTOR_RATE_LIMIT``)."""
    limiter = [make_rate_limiter(rate_limit, rate_window_s)] if rate_limit > 0 else []
    return [make_result_truncator(), *limiter, make_connector_call_logger()]


# --------------------------------------------------------------------------- policy examples


def deny_tools(
    names: Iterable[str],
    *,
    reason: str = "it is disabled by policy",
    name: str = "deny_tools",
    priority: int = -100,
) -> Hook:
    """A PRE hook blocking every tool matching one of ``names`` (fnmatch globs allowed).

    The LLM sees ``Tool '<tool>' is not allowed: <reason>`` as the call's error.
    """
    patterns = [names] if isinstance(names, str) else list(names)

    async def deny(ctx: HookContext) -> HookResult:
        tool = ctx.tool_name
        if tool is not None and any(fnmatch.fnmatchcase(tool, p) for p in patterns):
            return HookResult(allow=False, error=f"Tool '{tool}' is not allowed: {reason}")
        return HookResult()

    return Hook(
        name=name,
        hook_point=HookPoint.PRE_TOOL_USE,
        handler=deny,
        description=f"Block the tools {patterns}.",
        priority=priority,
        may_ask=False,
    )


DEFAULT_WRITE_VERBS: frozenset[str] = frozenset({
    "write", "delete", "remove", "create", "update", "insert", "send", "post", "put",
    "patch", "exec", "execute", "shell", "upload", "move", "rename", "drop", "kill", "set",
})
"""Words in a tool name that make ``read_only_mode`` treat it as state-changing."""

_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def _name_words(tool: str) -> set[str]:
    """``github__createIssue`` → ``{"github", "create", "issue"}``."""
    return {w.lower() for w in _WORD.findall(tool)}


def read_only_mode(
    *,
    write_verbs: Iterable[str] = DEFAULT_WRITE_VERBS,
    allow: Iterable[str] = (),
    priority: int = -100,
) -> Hook:
    """A PRE hook that blocks tools which may change state.

    A call is blocked when a word of the tool's name (split at ``_``, ``-``, ``.`` and
    camelCase) is one of ``write_verbs`` or the tool declares ``requires_confirmation``
    (hook metadata), unless the name matches one of the ``allow`` globs. This is a
    heuristic by name: name tools accordingly, or combine it with :func:`deny_tools`.
    """
    verbs = {v.lower() for v in write_verbs}
    allowed = [allow] if isinstance(allow, str) else list(allow)

    async def guard(ctx: HookContext) -> HookResult:
        tool = ctx.tool_name or ""
        if any(fnmatch.fnmatchcase(tool, p) for p in allowed):
            return HookResult()
        if ctx.metadata.get("requires_confirmation") or _name_words(tool) & verbs:
            return HookResult(
                allow=False,
                error=f"Read-only mode: tool '{tool}' may modify state and is blocked.",
            )
        return HookResult()

    return Hook(
        name="read_only_mode",
        hook_point=HookPoint.PRE_TOOL_USE,
        handler=guard,
        description="Block tools that may modify state.",
        priority=priority,
        may_ask=False,
    )
