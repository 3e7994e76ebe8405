"""A DAG's final answer under ``ANSWER`` guardrails (the PII redactor included): with one
registered, nothing of the answer is published before the guardrails passed it — the
synthesis is read whole, checked, then streamed as checked; a typed answer's JSON is checked
before its ``output`` is set (a rewrite must still be valid against the schema). Each hook
that ran leaves a ``guardrail`` event, as in a run; a block ends the DAG ``failed`` with
``error {kind: "guardrail", guardrail, message}``.
"""

from __future__ import annotations

import json
from typing import Any

from reactq.shared.dag import machine as M
from reactq.shared.dag.state import DagState
from reactq.shared.engine import guard
from reactq.shared.engine import output as O
from reactq.shared.events import Event
from reactq.shared.hooks import HookPoint
from reactq.workers.dags.context import DagContext


def guarded(ctx: DagContext) -> bool:
    return ctx.rt.hooks.has(HookPoint.ANSWER)


def check(ctx: DagContext, state: DagState, text: str, output: Any = None
          ) -> tuple[list[Event], str | None, M.Transition | None]:
    """``(events, the text to publish, None)``, or ``(events, None, the DAG's failing end)``."""
    got = ctx.rt.run(guard.check_text(ctx.rt.hooks, text, query=state.effective_goal(),
                                      metadata={**state.metadata, "dag_id": state.dag_id},
                                      conversation_id=state.dag_id, output=output))
    events = [M.emit(state, guard.GUARDRAIL_CHANNEL, point=HookPoint.ANSWER.value, guardrail=d.guardrail,
                     decision=d.decision, **({"message": d.message} if d.message else {}))
              for d in got.decisions]
    if got.blocked is not None:
        end = M.fail(state, got.blocked.message or "blocked", ctx.env(), kind="guardrail",
                     guardrail=got.blocked.guardrail)
        return events, None, end
    return events, got.answer if got.answer is not None else text, None


def checked_output(ctx: DagContext, state: DagState, value: Any
                   ) -> tuple[list[Event], str | None, Any, M.Transition | None]:
    """A typed answer's check: ``(events, text, value, None)`` or ``(events, None, None, end)``."""
    text = O.output_text(value)
    events, checked, end = check(ctx, state, text, value)
    if checked is None or checked == text:
        return events, checked, value, end
    assert state.output_schema is not None
    try:
        new = json.loads(checked)
    except ValueError:
        return events, None, None, M.fail(state, "A guardrail rewrote the answer into text that is not JSON",
                                          ctx.env(), kind="output_invalid")
    found = O.problems(state.output_schema, new)
    if found:
        return events, None, None, M.fail(
            state, f"A guardrail rewrote the answer into JSON not valid against output_schema: {found[0]}",
            ctx.env(), kind="output_invalid")
    return events, checked, new, None
