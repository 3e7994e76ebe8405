"""Tools: a name, a description, a pydantic argument model and a function (sync or async).

A ``ToolRegistry`` keeps tools in registration order. ``Tool.invoke`` validates the
arguments against the model first; a validation failure raises ``ToolArgumentsError``
whose message names the field, and the engine turns it into an error observation.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from reactq.shared.errors import ConfigError, ToolError, ToolNotFound
from reactq.shared.models import ToolResult


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
    inline: bool = False
    """Run a sync ``fn`` on the event loop instead of a thread: for quick, CPU-light tools,
    where a thread hop would cost more than the call."""
    metadata: dict[str, Any] = field(default_factory=dict)

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

    async def invoke(self, args: dict[str, Any]) -> str | ToolResult:
        """Validate ``args`` and run the tool; sync functions run in a thread unless ``inline``."""
        model = self.validate_args(args)
        kwargs = model.model_dump()
        if inspect.iscoroutinefunction(self.fn):
            coro = self.fn(**kwargs)
        elif self.inline and not self.timeout:
            return _normalize(self.fn(**kwargs))
        else:
            coro = asyncio.to_thread(self.fn, **kwargs)
        result = await (asyncio.wait_for(coro, self.timeout) if self.timeout else coro)
        return _normalize(result)


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

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.register(t)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ConfigError(f"Tool '{tool.name}' is already registered")
        self._tools[tool.name] = tool

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
        return ToolRegistry(t for n, t in self._tools.items() if n in wanted)

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
        )

    return wrap
