"""Guardrails in a run: the ``RUN_START`` check of the query and the ``ANSWER`` check of the
final answer, as events.

Every hook that ran leaves a ``guardrail`` event ``{point, guardrail, decision, message?}``
(``decision``: ``allowed``, ``rewritten`` or ``blocked``). A block ends the run ``failed``:
``error {kind: "guardrail", guardrail: <hook name>, message}`` then ``done``. A run with no
hook at these points pays nothing: the shells' steps ask ``HookRegistry.has`` first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reactq.shared.engine import ending
from reactq.shared.engine.loop import emit
from reactq.shared.engine.state import RunState
from reactq.shared.events import Event
from reactq.shared.hooks import HookContext, HookPoint, HookRegistry
from reactq.shared.hooks.base import Guarded

__all__ = ["Checked", "check_answer", "check_query"]

GUARDRAIL_CHANNEL = "guardrail"


@dataclass
class Checked:
    """A guardrail point's events; ``answer`` is what may be published (None: blocked)."""

    events: list[Event]
    answer: str | None


def _context(state: RunState, point: HookPoint, *, answer: str | None = None,
             output: Any = None, query: str | None = None) -> HookContext:
    meta = {**state.metadata, "run_id": state.run_id}
    user = meta.get("user_id")
    return HookContext(hook_point=point, metadata=meta, query=state.query if query is None else query, answer=answer,
                       output=output, conversation_id=state.run_id,
                       user_id=user if isinstance(user, str) else None)


def _events(state: RunState, point: HookPoint, got: Guarded, now: float) -> list[Event]:
    events = [emit(state, GUARDRAIL_CHANNEL, point=point.value, guardrail=d.guardrail,
                   decision=d.decision, **({"message": d.message} if d.message else {}))
              for d in got.decisions]
    if got.blocked is not None:
        events += ending.fail(state, got.blocked.message or "blocked", now=now, kind="guardrail",
                              guardrail=got.blocked.guardrail)
    return events


async def check_query(state: RunState, hooks: HookRegistry, *, now: float, text: str | None = None) -> Checked:
    """``RUN_START``: the query's check, before the run's first LLM call (``text``: another
    text the submitter gives the model, checked as the query is: a fork's edits)."""
    got = await hooks.run_guardrails(HookPoint.RUN_START, _context(state, HookPoint.RUN_START, query=text))
    return Checked(_events(state, HookPoint.RUN_START, got, now),
                   None if got.blocked is not None else state.query)


async def check_answer(state: RunState, hooks: HookRegistry, answer: str, *, now: float,
                       output: Any = None) -> Checked:
    """``ANSWER``: the answer (and ``output``) before anything of it is published."""
    ctx = _context(state, HookPoint.ANSWER, answer=answer, output=output)
    got = await hooks.run_guardrails(HookPoint.ANSWER, ctx)
    return Checked(_events(state, HookPoint.ANSWER, got, now),
                   None if got.blocked is not None else got.answer)
