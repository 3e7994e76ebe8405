"""Shared helpers for the engine behaviour tests (``test_engine_*.py``).

Everything runs in-process through ``reactq.shared.inprocess.run_local`` (or the step functions)
with scripted LLMs: no network, no Redis. ``Mode`` builds the same scenario for JSON mode
and native function calling, so most behaviours are tested as twins.

Remember that the answer synthesis (``stream_chat``) consumes a scripted reply too: a
script for a run that ends normally finishes with ``SYNTH`` (or any text reply).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from reactq.shared.engine.state import Interrupt, RunState
from reactq.shared.engine.deps import EngineDeps
from reactq.shared.events import Event, ListSink
from reactq.shared.hooks import Hook, HookContext, HookPoint, HookRegistry, HookResult
from reactq.shared.inprocess import InterruptQueue, run_local
from reactq.shared.llm.testing import Call, FunctionLLM, ScriptedLLM, final, text, tool_calls, tool_json
from reactq.shared.models import ChatMessage, LLMResult
from reactq.shared.requests import RunRequest
from reactq.shared.settings import EngineConfig
from reactq.shared.tools.base import Tool, ToolRegistry

SYNTH_TEXT = "The synthesized answer."
SYNTH = text(SYNTH_TEXT)
"""A reply for the synthesis ``stream_chat`` call at the end of a run."""

CHECKLIST_HEAD = "Before finalizing your answer, verify:"
SELF_CHECK_HEAD = "[Self-check]"
INTERRUPT_HEAD = "[USER INTERRUPT]"

# --------------------------------------------------------------------------- tools


class TextArgs(BaseModel):
    text: str


class AddArgs(BaseModel):
    a: int | float
    b: int | float


class AnyArgs(BaseModel):
    """Accepts (and passes on) any arguments."""

    model_config = ConfigDict(extra="allow")


@dataclass
class Recorder:
    """Remembers the arguments every recorded tool received."""

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def names(self) -> list[str]:
        return [n for n, _ in self.calls]


def echo_tool(recorder: Recorder | None = None, *, name: str = "echo") -> Tool:
    """SPEC §0's EchoTool: name ``echo``, returns ``text``."""

    def fn(text: str) -> str:
        if recorder is not None:
            recorder.calls.append((name, {"text": text}))
        return text

    return Tool(name=name, description="Echoes the input text back.", args_model=TextArgs, fn=fn)


def add_tool() -> Tool:
    def fn(a: float, b: float) -> str:
        total = a + b
        return str(int(total)) if float(total).is_integer() else str(total)

    return Tool(name="add", description="Add two numbers.", args_model=AddArgs, fn=fn)


def capture_tool(recorder: Recorder, *, name: str = "capture", result: Any = "captured") -> Tool:
    """A tool that records every argument it got (extra fields included)."""

    def fn(**kwargs: Any) -> Any:
        recorder.calls.append((name, dict(kwargs)))
        return result

    return Tool(name=name, description="Records its arguments.", args_model=AnyArgs, fn=fn)


def raising_tool(exc: BaseException, *, name: str = "boom") -> Tool:
    def fn(**kwargs: Any) -> str:
        raise exc

    return Tool(name=name, description="Always fails.", args_model=AnyArgs, fn=fn)


def stub_tools(n: int) -> list[Tool]:
    """T-C2's tools ``tool_0..tool_{n-1}``: "Description for tool N."."""
    return [
        Tool(name=f"tool_{i}", description=f"Description for tool {i}.", args_model=AnyArgs,
             fn=lambda **kw: "stub")
        for i in range(n)
    ]


# --------------------------------------------------------------------------- hooks


def pre_hook(fn: Callable[[HookContext], HookResult], *, name: str = "pre", priority: int = 0,
             tool_filter: str | None = None) -> Hook:
    async def handler(ctx: HookContext) -> HookResult:
        return fn(ctx)

    return Hook(name=name, hook_point=HookPoint.PRE_TOOL_USE, handler=handler,
                priority=priority, tool_filter=tool_filter)


def post_hook(fn: Callable[[HookContext], HookResult], *, name: str = "post", priority: int = 0,
              tool_filter: str | None = None) -> Hook:
    async def handler(ctx: HookContext) -> HookResult:
        return fn(ctx)

    return Hook(name=name, hook_point=HookPoint.POST_TOOL_USE, handler=handler,
                priority=priority, tool_filter=tool_filter)


# --------------------------------------------------------------------------- modes


@dataclass(frozen=True)
class Mode:
    """Builds replies for one loop mode, so a scenario can be written once for both."""

    name: str

    def __str__(self) -> str:
        return self.name

    @property
    def native(self) -> bool:
        return self.name == "native"

    @property
    def abilities(self) -> dict[str, bool]:
        return {"tool_call": True} if self.native else {}

    def call(self, name: str, args: dict[str, Any] | None = None, call_id: str = "c1",
             **kw: Any) -> LLMResult:
        """A turn with one tool call."""
        if self.native:
            return tool_calls((call_id, name, dict(args or {})), **kw)
        return tool_json(name, args, **kw)

    def answer(self, content: str, **kw: Any) -> LLMResult:
        """A final-answer turn."""
        return text(content, **kw) if self.native else final(content, **kw)

    def llm(self, replies: list[Any], **kw: Any) -> ScriptedLLM:
        return ScriptedLLM(replies, abilities=self.abilities, **kw)


JSON = Mode("json")
NATIVE = Mode("native")
MODES = [JSON, NATIVE]


# --------------------------------------------------------------------------- running


@dataclass
class Outcome:
    """A finished run: its state, its events and the LLM that served it."""

    state: RunState
    sink: ListSink
    llm: FunctionLLM

    @property
    def events(self) -> list[Event]:
        return self.sink.events

    @property
    def answer(self) -> str | None:
        """The loop's own answer (``AgentResult.answer``)."""
        return self.state.answer

    @property
    def done(self) -> dict[str, Any]:
        assert self.events and self.events[-1].channel == "done"
        return self.events[-1].data

    def loop_calls(self) -> list[Call]:
        """The tool loop's ``chat()`` calls (the synthesis stream excluded)."""
        return [c for c in self.llm.calls if not c.stream]

    def synthesis_calls(self) -> list[Call]:
        return [c for c in self.llm.calls if c.stream]

    def of(self, channel: str, **match: Any) -> list[dict[str, Any]]:
        """Payloads of the events on ``channel`` whose fields equal ``match``."""
        return [e.data for e in self.events
                if e.channel == channel and all(e.data.get(k) == v for k, v in match.items())]


def make_deps(llm: Any, tools: list[Tool] = (), *, hooks: list[Hook] | HookRegistry = (),
              config: EngineConfig | None = None, **kw: Any) -> EngineDeps:
    registry = hooks if isinstance(hooks, HookRegistry) else HookRegistry(hooks)
    return EngineDeps(llm=llm, registry=ToolRegistry(tools), hooks=registry,
                      config=config or EngineConfig(), **kw)


async def run(llm: Any, tools: list[Tool] = (), *, query: str = "What is going on?",
              hooks: list[Hook] | HookRegistry = (), config: EngineConfig | None = None,
              sink: ListSink | None = None, interrupts: InterruptQueue | None = None,
              cancel: asyncio.Event | None = None, deps: EngineDeps | None = None,
              allow_fallback: bool = False, status: str | None = "succeeded",
              allowlist: list[str] | None = None, **request: Any) -> Outcome:
    """Run one request to its end in-process.

    The run must end with ``status`` (``None``: any), and a synthesis that fell back to
    the loop's answer fails the test unless ``allow_fallback``: both usually mean the
    script is one reply short. ``allowlist`` is the request's ``tools`` field.
    """
    if allowlist is not None:
        request["tools"] = allowlist
    deps = deps or make_deps(llm, list(tools), hooks=hooks, config=config)
    sink = sink or ListSink()
    state = await run_local(RunRequest(query=query, **request), deps, sink=sink,
                            interrupts=interrupts, cancel=cancel)
    out = Outcome(state=state, sink=sink, llm=llm)
    if status is not None:
        assert state.status == status, f"run ended {state.status}: {state.error}"
    if not allow_fallback:
        fallbacks = out.of("error", kind="synthesis_fallback")
        assert not fallbacks, f"unexpected synthesis fallback: {fallbacks}"
    return out


class ManualIO:
    """A ``StepIO`` for driving steps by hand: collects events, serves interrupts."""

    def __init__(self, queue: InterruptQueue | None = None) -> None:
        self.events: list[Event] = []
        self.queue = queue

    async def publish(self, events: list[Event]) -> None:
        self.events.extend(events)

    async def interrupts(self, after: str | None) -> list[Interrupt]:
        return self.queue.after(after) if self.queue else []


# --------------------------------------------------------------------------- messages


def contents(messages: list[ChatMessage]) -> list[str]:
    return [m.text() for m in messages]


def count_containing(messages: list[ChatMessage], needle: str) -> int:
    return sum(1 for m in messages if needle in m.text())


def roles(messages: list[ChatMessage]) -> list[str]:
    return [m.role for m in messages]
