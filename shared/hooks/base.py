"""Hooks: the deterministic enforcement layer, and guardrails.

Hooks run in the worker, around every tool call, outside the LLM loop: nothing the LLM
says can skip them. ``PRE_TOOL_USE`` hooks may block a call or rewrite its arguments;
``POST_TOOL_USE`` hooks may rewrite the observation. Hooks of one point run in ascending
priority (ties in registration order); a hook that raises is logged as a side effect and
never crashes the run.

Guardrails are hooks at two more points: ``RUN_START`` (the query, before the run's first LLM
call) and ``ANSWER`` (the final answer and its ``output``, before anything of it is
published). Either may block the run (``allow=False``); an ``ANSWER`` hook may rewrite the
answer (``modified_answer``). ``run_guardrails`` runs them and says who decided what.
"""

from __future__ import annotations

import fnmatch
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

log = logging.getLogger(__name__)


class HookPoint(str, Enum):
    PRE_TOOL_USE = "pre_tool_use"
    POST_TOOL_USE = "post_tool_use"
    SESSION_START = "session_start"
    RUN_START = "run_start"
    """Before the run's first LLM call; the context carries ``query``."""
    ANSWER = "answer"
    """The final answer (and ``output``), before anything of it is published."""


@dataclass
class HookContext:
    """What a hook sees. ``metadata`` carries the run's request metadata plus
    ``run_id``, ``tool_call_id`` and ``requires_confirmation``."""

    hook_point: HookPoint
    tool_name: str | None = None
    tool_args: dict[str, Any] | None = None
    tool_result: str | None = None
    agent_id: str | None = None
    user_id: str | None = None
    conversation_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    query: str | None = None
    """The run's query (``RUN_START`` and ``ANSWER``)."""
    answer: str | None = None
    """The final answer's text (``ANSWER``; the JSON text for an ``output_schema`` run)."""
    output: Any = None
    """The parsed answer of an ``output_schema`` run (``ANSWER``), else None."""


@dataclass
class HookResult:
    allow: bool = True
    modified_args: dict[str, Any] | None = None
    modified_result: str | None = None
    side_effects: list[str] = field(default_factory=list)
    error: str | None = None
    modified_answer: str | None = None
    """``ANSWER``: the text to publish instead (redaction)."""
    ask: bool = False
    """``PRE_TOOL_USE``: ask a person to approve the call before it runs."""
    reason: str | None = None
    """Why (shown with an approval request)."""


@dataclass
class Decision:
    """What one guardrail decided: ``allowed``, ``rewritten`` or ``blocked``."""

    guardrail: str
    decision: str
    message: str | None = None


@dataclass
class Guarded:
    """The outcome of a guardrail point: every hook's decision, the (possibly rewritten)
    answer, and the hook that blocked, if one did (the chain stops there)."""

    decisions: list[Decision] = field(default_factory=list)
    answer: str | None = None
    blocked: Decision | None = None


Handler = Callable[[HookContext], Awaitable[HookResult]]


@dataclass
class Hook:
    """A named handler at one hook point; ``tool_filter`` is an fnmatch glob."""

    name: str
    hook_point: HookPoint
    handler: Handler
    description: str = ""
    priority: int = 0
    tool_filter: str | None = None
    may_ask: bool = True
    """A PreToolUse hook that never answers ``ask=True`` says so with False: the calls it runs
    for are then not held back as calls that may wait for a person (``docs/approvals.md``)."""

    def matches(self, tool_name: str | None) -> bool:
        if self.tool_filter is None:
            return True
        if tool_name is None:
            return False
        return fnmatch.fnmatch(tool_name, self.tool_filter)


class HookRegistry:
    """Hooks by point; runs them in priority order and merges their results."""

    def __init__(self, hooks: Iterable[Hook] = ()) -> None:
        self._hooks: list[Hook] = []
        # The hooks that apply to (point, tool name), in order: asked for every tool call.
        self._chains: dict[tuple[HookPoint, str | None], list[Hook]] = {}
        for h in hooks:
            self.register(h)

    def register(self, hook: Hook) -> None:
        self._hooks.append(hook)
        self._chains.clear()

    def __len__(self) -> int:
        return len(self._hooks)

    def __iter__(self) -> Iterator[Hook]:
        """The hooks in registration order."""
        return iter(list(self._hooks))

    def _ordered(self, point: HookPoint, tool_name: str | None) -> list[Hook]:
        chain = self._chains.get((point, tool_name))
        if chain is None:
            # sorted() is stable, so equal priorities keep registration order.
            chain = self._chains[(point, tool_name)] = sorted(
                (h for h in self._hooks if h.hook_point == point and h.matches(tool_name)),
                key=lambda h: h.priority,
            )
        return chain

    async def _call(self, hook: Hook, ctx: HookContext) -> HookResult:
        try:
            res: object = hook.handler(ctx)
            if inspect.isawaitable(res):  # a plain (sync) handler is tolerated too
                res = await res
        except Exception:  # a hook can never crash the agent
            log.exception("hook %s failed", hook.name)
            return HookResult(allow=True, side_effects=[f"Hook '{hook.name}' failed with exception"])
        if res is None:  # a handler that forgot to return means "no opinion"
            return HookResult()
        if not isinstance(res, HookResult):
            log.error("hook %s returned %s, not a HookResult", hook.name, type(res).__name__)
            return HookResult(allow=True, side_effects=[f"Hook '{hook.name}' failed with exception"])
        return res

    async def run_pre_tool(self, ctx: HookContext) -> HookResult:
        """Run PRE hooks; the first ``allow=False`` stops the chain. The first hook that asks
        for approval gives the result its ``ask`` and ``reason``."""
        args = dict(ctx.tool_args or {})
        modified: dict[str, Any] | None = None
        effects: list[str] = []
        ask: HookResult | None = None
        for hook in self._ordered(HookPoint.PRE_TOOL_USE, ctx.tool_name):
            ctx.tool_args = args
            res = await self._call(hook, ctx)
            effects.extend(res.side_effects)
            if not res.allow:
                return HookResult(
                    allow=False,
                    side_effects=effects,
                    error=res.error or f"Blocked by hook '{hook.name}'",
                )
            if res.modified_args is not None:
                modified = res.modified_args
                args = dict(res.modified_args)
            if res.ask and ask is None:
                ask = HookResult(ask=True, reason=res.reason or f"hook '{hook.name}' asks for approval")
        return HookResult(allow=True, modified_args=modified, side_effects=effects,
                          ask=ask is not None, reason=ask.reason if ask else None)

    async def run_post_tool(self, ctx: HookContext) -> HookResult:
        """Run POST hooks, each fed the result as rewritten so far."""
        result = ctx.tool_result
        modified: str | None = None
        effects: list[str] = []
        for hook in self._ordered(HookPoint.POST_TOOL_USE, ctx.tool_name):
            ctx.tool_result = result
            res = await self._call(hook, ctx)
            effects.extend(res.side_effects)
            if res.modified_result is not None:
                modified = res.modified_result
                result = res.modified_result
        return HookResult(allow=True, modified_result=modified, side_effects=effects)

    def may_ask(self, tool_name: str) -> bool:
        """Whether a PreToolUse hook that may ask for approval runs for ``tool_name``."""
        return any(h.may_ask for h in self._ordered(HookPoint.PRE_TOOL_USE, tool_name))

    def has(self, point: HookPoint) -> bool:
        """Whether any hook is registered at ``point`` (what a run without guardrails asks)."""
        return any(h.hook_point == point for h in self._hooks)

    async def run_guardrails(self, point: HookPoint, ctx: HookContext) -> Guarded:
        """Run the hooks of ``RUN_START`` or ``ANSWER`` in order; each ``ANSWER`` hook sees the
        answer as rewritten so far. The first block stops the chain. A hook that raises is
        logged and counts as allowing (as at the tool points)."""
        out = Guarded(answer=ctx.answer)
        for hook in self._ordered(point, None):
            ctx.answer = out.answer
            res = await self._call(hook, ctx)
            if not res.allow:
                out.blocked = Decision(hook.name, "blocked", res.error or f"Blocked by guardrail '{hook.name}'")
                out.decisions.append(out.blocked)
                return out
            if point == HookPoint.ANSWER and res.modified_answer is not None \
                    and res.modified_answer != out.answer:
                out.answer = res.modified_answer
                out.decisions.append(Decision(hook.name, "rewritten"))
            else:
                out.decisions.append(Decision(hook.name, "allowed"))
        return out

    async def run_session_start(self, ctx: HookContext) -> HookResult:
        effects: list[str] = []
        for hook in sorted(
            (h for h in self._hooks if h.hook_point == HookPoint.SESSION_START),
            key=lambda h: h.priority,
        ):
            effects.extend((await self._call(hook, ctx)).side_effects)
        return HookResult(allow=True, side_effects=effects)
