"""Guardrails in a run: the ``RUN_START`` check of every text a submitter gives the model (the
query, the system prompt, each follow-up message before it is delivered) and the ``ANSWER``
check of the final answer, as events.

Every hook that ran leaves a ``guardrail`` event ``{point, guardrail, decision, message?}``
(``decision``: ``allowed``, ``rewritten`` or ``blocked``). A block ends the run ``failed``:
``error {kind: "guardrail", guardrail: <hook name>, message}`` then ``done``. A follow-up
message (an interrupt, a thread's ``inject``) that a ``RUN_START`` hook blocks is never
delivered: its events carry ``interrupt_id`` and the run goes on. A run with no hook at these
points pays nothing: the shells' steps ask ``HookRegistry.has`` first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reactq.shared.engine import ending
from reactq.shared.engine.deps import EngineDeps, StepIO
from reactq.shared.engine.loop import emit
from reactq.shared.engine.state import Interrupt, RunState
from reactq.shared.events import Event
from reactq.shared.hooks import HookContext, HookPoint, HookRegistry
from reactq.shared.hooks.base import Guarded

__all__ = ["Checked", "check_answer", "check_query", "check_text", "check_texts", "read_interrupts"]

GUARDRAIL_CHANNEL = "guardrail"


@dataclass
class Checked:
    """A guardrail point's events; ``answer`` is what may be published (None: blocked)."""

    events: list[Event]
    answer: str | None


def _context(state: RunState, point: HookPoint, *, answer: str | None = None,
             output: Any = None, query: str | None = None, field: str = "query") -> HookContext:
    meta = {**state.metadata, "run_id": state.run_id}
    if field != "query":
        meta["field"] = field  # which text the hook sees as ``query``
    user = meta.get("user_id")
    return HookContext(hook_point=point, metadata=meta, query=state.query if query is None else query,
                       answer=answer, output=output, conversation_id=state.run_id,
                       user_id=user if isinstance(user, str) else None)


def _decisions(state: RunState, point: HookPoint, got: Guarded, **extra: Any) -> list[Event]:
    return [emit(state, GUARDRAIL_CHANNEL, point=point.value, guardrail=d.guardrail, decision=d.decision,
                 **({"message": d.message} if d.message else {}), **extra)
            for d in got.decisions]


def _events(state: RunState, point: HookPoint, got: Guarded, now: float) -> list[Event]:
    events = _decisions(state, point, got)
    if got.blocked is not None:
        events += ending.fail(state, got.blocked.message or "blocked", now=now, kind="guardrail",
                              guardrail=got.blocked.guardrail)
    return events


async def check_texts(hooks: HookRegistry, texts: list[tuple[str, str]],
                      metadata: dict[str, Any]) -> tuple[list[tuple[str, Guarded]], Guarded | None]:
    """``RUN_START`` over each ``(field, text)`` in turn (the hook sees the text as ``query``,
    ``metadata["field"]`` names it); every outcome, and the first that blocked (None: none).
    What a DAG checks its goal and its steps' tasks with."""
    outcomes: list[tuple[str, Guarded]] = []
    for field, text in texts:
        ctx = HookContext(hook_point=HookPoint.RUN_START, metadata={**metadata, "field": field}, query=text)
        got = await hooks.run_guardrails(HookPoint.RUN_START, ctx)
        outcomes.append((field, got))
        if got.blocked is not None:
            return outcomes, got
    return outcomes, None


async def check_query(state: RunState, hooks: HookRegistry, *, now: float, text: str | None = None) -> Checked:
    """``RUN_START``: the query's check and the system prompt's, before the run's first LLM
    call (``text``: another text the submitter gives the model, checked as the query is: a
    fork's edits)."""
    if text is not None:
        got = await hooks.run_guardrails(HookPoint.RUN_START,
                                         _context(state, HookPoint.RUN_START, query=text, field="edit"))
        return Checked(_events(state, HookPoint.RUN_START, got, now),
                       None if got.blocked is not None else state.query)
    got = await hooks.run_guardrails(HookPoint.RUN_START, _context(state, HookPoint.RUN_START))
    if got.blocked is None and state.system_prompt:
        ctx = _context(state, HookPoint.RUN_START, query=state.system_prompt, field="system_prompt")
        more = await hooks.run_guardrails(HookPoint.RUN_START, ctx)
        got = Guarded(decisions=got.decisions + more.decisions, blocked=more.blocked)
    return Checked(_events(state, HookPoint.RUN_START, got, now),
                   None if got.blocked is not None else state.query)


async def read_interrupts(state: RunState, deps: EngineDeps, io: StepIO) -> list[Interrupt]:
    """The follow-up messages after the run's cursor (``io.interrupts``), each checked by the
    ``RUN_START`` guardrails first: a blocked one is never delivered (its ``guardrail`` events,
    with ``interrupt_id``, go out at once). When every message read was blocked, the cursor
    moves past them; a blocked message after an allowed one is passed over with it (the
    allowed message carries its cursor)."""
    interrupts = await io.interrupts(state.interrupt_cursor)
    if not interrupts or not deps.hooks.has(HookPoint.RUN_START):
        return interrupts
    allowed: list[Interrupt] = []
    events: list[Event] = []
    for msg in interrupts:
        ctx = _context(state, HookPoint.RUN_START, query=msg.content, field="interrupt")
        got = await deps.hooks.run_guardrails(HookPoint.RUN_START, ctx)
        events += _decisions(state, HookPoint.RUN_START, got, interrupt_id=msg.id)
        if got.blocked is None:
            allowed.append(msg)
        elif allowed:
            allowed[-1] = allowed[-1].model_copy(update={"cursor": msg.cursor})
    await io.publish(events)
    if not allowed:
        state.interrupt_cursor = interrupts[-1].cursor
    return allowed


async def check_text(hooks: HookRegistry, answer: str, *, query: str, metadata: dict[str, Any],
                     conversation_id: str, output: Any = None) -> Guarded:
    """The ``ANSWER`` guardrails over a text that is not a run's (a DAG's final answer)."""
    user = metadata.get("user_id")
    ctx = HookContext(hook_point=HookPoint.ANSWER, metadata=metadata, query=query, answer=answer,
                      output=output, conversation_id=conversation_id,
                      user_id=user if isinstance(user, str) else None)
    return await hooks.run_guardrails(HookPoint.ANSWER, ctx)


async def check_answer(state: RunState, hooks: HookRegistry, answer: str, *, now: float,
                       output: Any = None) -> Checked:
    """``ANSWER``: the answer (and ``output``) before anything of it is published."""
    ctx = _context(state, HookPoint.ANSWER, answer=answer, output=output)
    got = await hooks.run_guardrails(HookPoint.ANSWER, ctx)
    return Checked(_events(state, HookPoint.ANSWER, got, now),
                   None if got.blocked is not None else got.answer)
