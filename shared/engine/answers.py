"""The answer step when something must see the answer before anyone else does: a run with an
``output_schema`` (a typed answer), or a run with an ``ANSWER`` guardrail. Neither streams
while it works; what is published goes out with the step's commit, after every check passed.

A typed answer takes one step per attempt. An attempt asks the model through
``structured_llm_call`` with the schema (a forced function call, or the ``json_schema``
response format where the model's registry entry says it constrains replies; then JSON mode;
then plain text), and validates the value with ``jsonschema``. An invalid value leaves the run
in its answer phase with the validator's errors in ``output_feedback`` (event ``phase
{phase: "output_repair", attempt, problems}``), so the next attempt — a step of its own, past
the flow gate and the token budget like every LLM step — sees them; after
``EngineConfig.output_repairs`` repairs the run ends ``failed``, ``error {kind:
"output_invalid"}`` naming the first failing path. Every attempt's usage counts.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from reactq.shared.engine import ending, guard, loop
from reactq.shared.engine import output as O
from reactq.shared.engine.deps import EngineDeps, StepIO
from reactq.shared.engine.next import Advance, Answer, advanced
from reactq.shared.engine.state import RunState
from reactq.shared.engine.structured import structured_llm_call
from reactq.shared.engine.synthesis import fallback_chunks, synthesis_messages, synthesize
from reactq.shared.errors import RateLimited, StructuredOutputError
from reactq.shared.events import Event
from reactq.shared.hooks import HookPoint
from reactq.shared.llm.base import LLM, DelegatingLLM, answer_synthesis
from reactq.shared.models import ChatMessage, LLMResult, StreamChunk, Usage

OUTPUT_SYSTEM = """You write the final answer of an agent as JSON data. You are given a user's \
question and the execution trace of an agent that worked on it with tools.
- Reply with ONLY a JSON value valid against the JSON Schema you are given: no prose, no \
markdown, no code fences.
- Take the facts from the question and the trace; never invent values the schema asks for."""
FUNCTION_NAME = "final_answer"


class _Meter(DelegatingLLM):
    """Counts what every call of an attempt cost (failed levels included) and keeps the last
    reply's text, for the repair request."""

    def __init__(self, inner: LLM) -> None:
        super().__init__(inner)
        self.usage = Usage()
        self.last = ""

    async def chat(self, messages: list[ChatMessage], **options: Any) -> LLMResult:
        result = await self._inner.chat(messages, **options)
        self.usage = self.usage + Usage.from_dict(result.usage)
        calls = result.message.tool_calls
        self.last = result.message.text() or (json.dumps(calls[0].arguments, ensure_ascii=False)
                                               if calls else "")
        return result

    def stream_chat(self, messages: list[ChatMessage], **options: Any) -> AsyncIterator[StreamChunk]:
        return self._inner.stream_chat(messages, **options)


def output_messages(state: RunState) -> list[ChatMessage]:
    """An attempt's request: the synthesis' question and trace, the schema, the repairs so far."""
    assert state.output_schema is not None
    system, user = synthesis_messages(state, system_prompt=OUTPUT_SYSTEM)
    ask = f"{user.content}\n\n{O.output_prompt(state.output_schema)}"
    return [system, ChatMessage(role="user", content=ask), *state.output_feedback]


async def typed_answer_step(state: RunState, deps: EngineDeps, io: StepIO) -> Advance:
    """One attempt at the typed answer; the run ends, or waits for its next attempt."""
    schema = state.output_schema
    assert schema is not None
    got = await ask_typed(deps.llm, output_messages(state), schema, native=state.mode == "native")
    state.usage = state.usage + got.usage
    state.output_attempts += 1
    if not got.valid:
        return advanced(state, _invalid(state, deps, got), Answer())
    return await _publish(state, deps, io, O.output_text(got.value), got.value)


@dataclass
class Typed:
    """One answer attempt: the value, what is wrong with it, the reply, what it cost."""

    value: Any
    problems: list[O.Problem]
    reply: str
    parsed: bool
    """False: no JSON object came back at all."""
    usage: Usage

    @property
    def valid(self) -> bool:
        return self.parsed and not self.problems


async def ask_typed(llm: LLM, messages: list[ChatMessage], schema: dict[str, Any], *,
                    native: bool = True) -> Typed:
    """One attempt: ``structured_llm_call`` for ``schema`` (wrapped when not an object), then
    ``jsonschema``. ``native=False``: no forced function call (a JSON-mode run)."""
    meter = _Meter(llm)
    wrapped = not O.is_object_schema(schema)
    try:
        got = await structured_llm_call(
            meter, messages, O.call_schema(schema), FUNCTION_NAME,
            regex_fallback=O.bare_value if wrapped else None, prefer_json_schema=True,
            allow_native=native, passthrough=(RateLimited,))
    except StructuredOutputError:
        return Typed(None, [], meter.last[:2000], False, meter.usage)
    value, present = O.unwrap(schema, got.raw_data)
    found = O.problems(schema, value) if present else O.problems(O.call_schema(schema), got.raw_data)
    return Typed(value, found, O.output_text(got.raw_data), True, meter.usage)


def shown_problems(got: Typed) -> list[str]:
    """What an ``output_repair`` event and an ``output_invalid`` error say (at most 5)."""
    return [str(p) for p in got.problems[:5]] or ["$: the reply was not a JSON object"]


def _invalid(state: RunState, deps: EngineDeps, got: Typed) -> list[Event]:
    """A repair request for the next attempt, or the run's end when none is left."""
    attempt = state.output_attempts
    shown = shown_problems(got)
    if attempt <= deps.config.output_repairs:
        state.output_feedback += O.repair_messages(got.reply, got.problems)
        return [loop.emit(state, "phase", phase="output_repair", attempt=attempt, problems=shown)]
    return ending.fail(state, invalid_message(attempt, shown), now=deps.clock(), kind="output_invalid",
                       path=got.problems[0].path if got.problems else "$")


def invalid_message(attempts: int, shown: list[str]) -> str:
    return (f"The answer is not valid against output_schema after {attempts} "
            f"attempt{'s' if attempts > 1 else ''}: {shown[0]}")


async def ready_answer_step(state: RunState, deps: EngineDeps, io: StepIO) -> Advance:
    """An answer that needs no model call (the budget's summary), once the ``ANSWER``
    guardrails passed it."""
    return await _publish(state, deps, io, state.answer or "", typed=False)


async def _publish(state: RunState, deps: EngineDeps, io: StepIO, text: str, value: Any = None,
                   pre: list[Event] | None = None, typed: bool = True) -> Advance:
    """The checked answer (``ANSWER`` guardrails, when registered) and the run's end.
    ``typed=False``: not the JSON answer of an ``output_schema`` (the budget's summary)."""
    events = list(pre or [])
    if deps.hooks.has(HookPoint.ANSWER):
        checked = await guard.check_answer(state, deps.hooks, text, now=deps.clock(), output=value)
        events += checked.events
        if checked.answer is None:
            return advanced(state, events, Answer())
        if checked.answer != text and not typed:
            text = checked.answer
        elif checked.answer != text:
            text, value, bad = _rewritten(state, checked.answer, value)
            if bad is not None:
                return advanced(state, events + ending.fail(
                    state, bad, now=deps.clock(), kind="output_invalid"), Answer())
    if state.output_schema is not None and typed:
        state.output = value
    events += ending.synthesis_started(state)
    events += [ending.answer_delta(state, c) for c in fallback_chunks(text)]
    leftovers = await io.interrupts(state.interrupt_cursor)
    events += ending.finish(state, text, now=deps.clock(),
                            pending=[i.content for i in leftovers] or None)
    return advanced(state, events, Answer())


def _rewritten(state: RunState, text: str, value: Any) -> tuple[str, Any, str | None]:
    """A guardrail's rewrite of a typed answer must still be JSON valid against the schema."""
    if state.output_schema is None:
        return text, value, None
    try:
        new = json.loads(text)
    except ValueError:
        return text, value, "A guardrail rewrote the answer into text that is not JSON"
    found = O.problems(state.output_schema, new)
    if found:
        return text, value, f"A guardrail rewrote the answer into JSON not valid against output_schema: {found[0]}"
    return text, new, None


async def guarded_answer_step(state: RunState, deps: EngineDeps, io: StepIO) -> Advance:
    """The synthesis, held back until the ``ANSWER`` guardrails passed it."""
    fallback = state.answer or ""
    pre: list[Event] = []
    if not answer_synthesis(deps.llm):
        text = fallback
    else:
        text, failure = await synthesize(state, deps.llm)
        if failure is not None:
            pre.append(ending.fallback_event(state, failure))
            text = fallback
    return await _publish(state, deps, io, text, pre=pre)
