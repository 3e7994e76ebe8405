"""Tools: a name, a description, a pydantic argument model and a function (sync or async).

A ``ToolRegistry`` keeps tools in registration order. ``Tool.invoke`` validates the
arguments against the model first; a validation failure raises ``ToolArgumentsError``
whose message names the field, and the engine turns it into an error observation.

Every call has a deadline: ``Tool.timeout``, else the registry's ``default_timeout``
(``REACTQ_TOOL_TIMEOUT``, 60 s). A tool with ``isolate=True`` (the default) runs in a
tool-runner process (:mod:`reactq.shared.tools.isolation`), where the deadline is hard (the
process is killed) and a tool that holds the GIL cannot stall the worker. The bounded
built-ins set ``isolate=False`` and run in the worker.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from reactq.shared.errors import ConfigError, ToolError, ToolNotFound
from reactq.shared.models import ToolResult

log = logging.getLogger(__name__)

DEFAULT_TOOL_TIMEOUT = 60.0
"""Seconds a tool call may take when neither the tool nor the registry says otherwise."""


class ToolArgumentsError(ToolError):
    """The LLM's arguments did not validate; the message names each bad field."""


@dataclass
class Tool:
    """One tool. ``idempotent=False`` tools are never silently re-run after a crash."""

    name: str
    description: str
    args_model: type[BaseModel]
    fn: Callable[..., Any]
    idempotent: bool = True
    requires_confirmation: bool = False
    cacheable: bool = False
    timeout: float | None = None
    """Seconds a call may take; None = the registry's ``default_timeout``."""
    inline: bool = False
    """Run a sync ``fn`` on the event loop instead of a thread: for quick, CPU-light tools,
    where a thread hop would cost more than the call (only with ``isolate=False``)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    isolate: bool = True
    """Run calls in a tool-runner process (hard deadline; the GIL of the worker stays free).
    Set False only for tools whose every call is bounded and quick. Last, so that positional
    construction written before it existed keeps working."""
    requires_approval: bool = False
    """Every call waits for a person's decision before it runs (``docs/approvals.md``)."""
    approval_on_timeout: Literal["reject", "approve"] = "reject"
    """What an approval this tool demands does when nobody decides in time: the operator's
    ``reject``, unless the tool says its calls may go ahead (``approve``)."""

    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments, as sent to the LLM."""
        schema = self.args_model.model_json_schema()
        schema.pop("title", None)
        return schema

    def openai_schema(self) -> dict[str, Any]:
        """The ``tools`` entry for this tool. Built once: schema generation is costly and
        every loop turn sends it."""
        cached = self.metadata.get("_openai_schema")
        if cached is None:
            cached = self.metadata["_openai_schema"] = self._build_schema()
        return cached  # type: ignore[no-any-return]

    def _build_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters(),
            },
        }

    def validate_args(self, args: dict[str, Any]) -> BaseModel:
        try:
            return self.args_model.model_validate(args)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(arguments)'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ToolArgumentsError(f"Invalid arguments for tool '{self.name}': {problems}") from None

    async def invoke(self, args: dict[str, Any], *,
                     default_timeout: float | None = None) -> str | ToolResult:
        """Validate ``args`` and run the tool within its deadline (``ToolTimeoutError``).

        Isolated tools run in a tool-runner process; the others: async functions on the
        loop, sync ones in a thread unless ``inline`` (their deadline is soft: a thread
        cannot be stopped, which is why only bounded tools run that way)."""
        model = self.validate_args(args)
        kwargs = model.model_dump()
        timeout = self.timeout or default_timeout or DEFAULT_TOOL_TIMEOUT
        loc = self._locator() if self.isolate else None
        if loc is not None:
            from reactq.shared.tools.isolation import pool

            token = object()
            try:
                result = await asyncio.to_thread(pool().call, loc, kwargs, timeout, self.name, token)
            except asyncio.CancelledError:
                pool().cancel(token)  # a cancelled run does not leave its tool running
                raise
            return _normalize(result)
        if inspect.iscoroutinefunction(self.fn):
            coro = self.fn(**kwargs)
        elif self.inline and not self.timeout:
            return _normalize(self.fn(**kwargs))
        else:
            coro = asyncio.to_thread(self.fn, **kwargs)
        try:
            result = await asyncio.wait_for(coro, timeout)
        except asyncio.TimeoutError:
            from reactq.shared.tools.isolation import ToolTimeoutError

            raise ToolTimeoutError(
                f"Tool '{self.name}' timed out after {timeout:g}s (its deadline: the tool's "
                "timeout, default REACTQ_TOOL_TIMEOUT); try a smaller input or another way."
            ) from None
        return _normalize(result)

    def _locator(self) -> tuple[str, str, str] | None:
        """Where a tool-runner finds ``fn`` (cached); None = run in-process, said once."""
        if "_locator" not in self.metadata:
            from reactq.shared.tools.isolation import locator

            loc = self.metadata["_locator"] = locator(self.fn, self.metadata, self.name)
            if loc is None:
                log.warning("tool '%s' is not importable by name (a closure or __main__): it "
                            "runs in the worker, with a soft deadline", self.name)
        return self.metadata["_locator"]  # type: ignore[no-any-return]


def _normalize(result: Any) -> str | ToolResult:
    if isinstance(result, ToolResult):
        return result
    if result is None:
        return ""
    return result if isinstance(result, str) else _to_text(result)


def _to_text(value: Any) -> str:
    import json

    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


class ToolRegistry:
    """Tools by name, in registration order."""

    def __init__(self, tools: Iterable[Tool] = (), *,
                 default_timeout: float = DEFAULT_TOOL_TIMEOUT) -> None:
        self.default_timeout = default_timeout
        """The deadline of a call whose tool has no ``timeout`` (``REACTQ_TOOL_TIMEOUT``)."""
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.register(t)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ConfigError(f"Tool '{tool.name}' is already registered")
        self._tools[tool.name] = tool

    def add_missing(self, tools: Iterable[Tool]) -> None:
        """Register the tools whose names are not known yet. The table is replaced at once, so
        a reader in another thread sees it before or after, never half-changed."""
        fresh = {t.name: t for t in tools if t.name not in self._tools}
        if fresh:
            self._tools = {**self._tools, **fresh}

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise ToolNotFound(
                f"Unknown tool '{name}'. Available tools: {self.names()}"
            ) from None

    def names(self) -> list[str]:
        return list(self._tools)

    def filtered(self, names: Iterable[str]) -> ToolRegistry:
        """A new registry with only ``names`` (unknown ones dropped), in registration order."""
        wanted = set(names)
        return ToolRegistry((t for n, t in self._tools.items() if n in wanted),
                            default_timeout=self.default_timeout)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())


def tool(
    name: str | None = None,
    *,
    description: str | None = None,
    idempotent: bool = True,
    timeout: float | None = None,
    isolate: bool = True,
    requires_approval: bool = False,
    approval_on_timeout: Literal["reject", "approve"] = "reject",
) -> Callable[[Callable[..., Any]], Tool]:
    """Decorator: build a ``Tool`` from a function whose parameters are annotated.

    The argument model is derived from the signature with ``pydantic.create_model``.
    """
    from pydantic import create_model

    def wrap(fn: Callable[..., Any]) -> Tool:
        sig = inspect.signature(fn)
        hints = inspect.get_annotations(fn, eval_str=True)
        fields: dict[str, Any] = {}
        for pname, p in sig.parameters.items():
            ann = hints.get(pname, Any)
            default = ... if p.default is inspect.Parameter.empty else p.default
            fields[pname] = (ann, default)
        model = create_model(f"{fn.__name__}_args", **fields)  # type: ignore[call-overload]
        doc = (description or inspect.getdoc(fn) or "").strip()
        return Tool(
            name=name or fn.__name__,
            description=doc,
            args_model=model,
            fn=fn,
            idempotent=idempotent,
            timeout=timeout,
            isolate=isolate,
            requires_approval=requires_approval,
            approval_on_timeout=approval_on_timeout,
        )

    return wrap
