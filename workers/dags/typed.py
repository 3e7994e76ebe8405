"""A DAG's final answer as JSON valid against its ``output_schema``.

The same attempts as a run's typed answer (``reactq.shared.engine.answers.ask_typed``), over the
DAG synthesis' sources; the attempts and their repairs run in the one answer task (a DAG has
no token budget to stop between them). Events: ``phase {name: "output_repair", attempt,
problems}`` per repair, then the answer's JSON text (``answer`` start, deltas, done) and
``done`` with ``output`` — or ``error {kind: "output_invalid"}`` and a ``failed`` ``done``.
"""

from __future__ import annotations

from reactq.shared.dag import machine as M
from reactq.shared.dag.query import output_messages
from reactq.shared.dag.state import DagState
from reactq.shared.engine import output as O
from reactq.shared.engine.answers import Typed, ask_typed, invalid_message, shown_problems
from reactq.shared.engine.synthesis import fallback_chunks
from reactq.shared.events import Event
from reactq.shared.models import ChatMessage
from reactq.workers.dags.context import DagContext
from reactq.workers.dags.guarded import checked_output, guarded


def typed_answer(ctx: DagContext, state: DagState, pending: list[str]) -> M.Transition:
    """Ask, validate, repair; then conclude the DAG either way."""
    schema = state.output_schema
    assert schema is not None
    messages = output_messages(state.effective_goal(), state.steps, state.analysis, schema,
                               truncation=ctx.config.synthesis_truncation)
    repairs = ctx.rt.config.output_repairs
    events: list[Event] = []
    feedback: list[ChatMessage] = []
    attempt = 0
    while True:
        attempt += 1
        got: Typed = ctx.rt.run(ask_typed(ctx.rt.llm(state.model), messages + feedback, schema))
        state.usage = state.usage + got.usage
        if got.valid or attempt > repairs:
            break
        events.append(M.emit(state, "phase", name="output_repair", attempt=attempt,
                             problems=shown_problems(got)))
        feedback += O.repair_messages(got.reply, got.problems)
    env = ctx.env()
    if not got.valid:
        message = invalid_message(attempt, shown_problems(got))
        state.error = message
        events.append(M.emit(state, "error", kind="output_invalid", message=message,
                             path=got.problems[0].path if got.problems else "$"))
        return M.Transition(events + M.conclude(state, f"Agent error: {message}", env, status="failed"))
    value, text = got.value, O.output_text(got.value)
    if guarded(ctx):  # its JSON is checked before anything of it is published
        checks, checked, value, end = checked_output(ctx, state, got.value)
        events += checks
        if checked is None and end is not None:
            end.events = events + end.events
            return end
        text = checked or text
    state.output = value
    events.append(M.emit(state, "answer", status="start"))
    events += [M.emit(state, "answer", status="delta", content=c) for c in fallback_chunks(text)]
    events.append(M.emit(state, "answer", status="done"))
    events.append(M.emit(state, "phase", name="synthesizing", status="done", round=state.round))
    return M.Transition(events + M.conclude(state, text, env, pending=pending or None))
