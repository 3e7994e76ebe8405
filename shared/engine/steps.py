"""One step of a run per kind of next step, over injected dependencies. Both shells call these.

A step mutates the ``RunState`` and returns an ``Advance``: the events it produced that were
not already published, and what comes next (``next.next_step``). Events a user should see while the step is still working (``thinking start``
before the LLM call, each answer delta) go out at once through ``io.publish``; the shell
publishes the returned ones together with the saved state. Every event carries its
``seq``, so a shell that publishes idempotently by ``seq`` can redo a step safely.
"""

from __future__ import annotations

import asyncio

from reactq.shared.engine import answers, billing, ending, fork, guard, loop, recorded
from reactq.shared.engine.callevents import done_data
from reactq.shared.engine.conversation import enriched_query
from reactq.shared.engine.deps import EngineDeps, StepIO
from reactq.shared.engine.next import Advance, Answer, CallLLM, RunTools, SelectTools, advanced
from reactq.shared.engine.selection import select_tools
from reactq.shared.engine.state import RunState, ToolOutcome
from reactq.shared.engine.synthesis import fallback_chunks, synthesize
from reactq.shared.engine.toolexec import execute_call
from reactq.shared.engine.waiting import may_wait, run_held
from reactq.shared.events import Event
from reactq.shared.hooks import HookPoint
from reactq.shared.llm.base import ability, answer_synthesis, max_tool_turns


async def select_step(state: RunState, deps: EngineDeps, io: StepIO) -> Advance:
    """``SelectTools``: the ``RUN_START`` guardrails (when registered), tool selection when
    there are many tools, then the first messages. A fork (``engine/fork.py``) says so first,
    and keeps its parent's tools and history."""
    events: list[Event] = []
    if state.forked_from is not None:
        await io.publish([loop.emit(state, "fork", **fork.fork_event_data(state))])
    for text in [None, *fork.edited_texts(state)] if deps.hooks.has(HookPoint.RUN_START) else []:
        checked = await guard.check_query(state, deps.hooks, now=deps.clock(), text=text)
        if checked.answer is None:  # blocked: the run ends before any LLM call
            return advanced(state, checked.events, SelectTools())
        await io.publish(checked.events)  # before selection's call, as the decision came first
    state.answer_guarded = deps.hooks.has(HookPoint.ANSWER)
    if state.forked_from is not None:
        fork.resume(state, deps.schemas(state), now=deps.clock())
        return advanced(state, events, SelectTools())
    selected: list[str] | None = None
    if loop.needs_selection(state, deps.config):
        await io.publish([loop.selecting_event(state)])
        available = deps.registry.filtered(state.available_tools)
        # On a thread, "and the other one?" needs the conversation to pick tools (the previous-conversation block).
        with billing.tally() as bill:
            try:
                selected = await select_tools(
                    deps.selection_llm or deps.llm, enriched_query(state.history, state.query), available,
                    max_tools=deps.config.tool_selection_max,
                    desc_length=deps.config.compact_catalog_desc_length,
                )
            finally:  # a cap that refused a later attempt leaves the earlier ones billed
                state.usage = state.usage + bill.usage
    loop.set_tools(state, selected)
    loop.start(state, deps.schemas(state), now=deps.clock())
    return advanced(state, events, SelectTools())


async def llm_step(state: RunState, deps: EngineDeps, io: StepIO) -> Advance:
    """``CallLLM``: one loop turn up to (and including) processing the LLM's reply."""
    await io.publish(loop.begin_turn(state))
    events: list[Event] = []
    if deps.guard is not None:
        with billing.tally() as bill:
            try:
                compacted = await deps.guard.check_and_compact(state.messages, hint="react_iteration")
            finally:
                state.usage = state.usage + bill.usage
        events += loop.apply_compaction(state, compacted)
    turns = max_tool_turns(deps.llm)
    request = loop.llm_request(state, deps.schemas(state), ability(deps.llm, "json_mode"),
                               json_schema=ability(deps.llm, "json_schema"), max_tool_turns=turns)
    result = await deps.llm.chat(loop.llm_messages(state, turns), **request)
    interrupts = await guard.read_interrupts(state, deps, io)
    events += loop.on_llm_reply(state, result, interrupts, deps.config, now=deps.clock(),
                                held=lambda call: may_wait(state, deps, call))
    return advanced(state, events, CallLLM())


async def run_tool(state: RunState, deps: EngineDeps, call_id: str, io: StepIO, *,
                   worker: str | None = None) -> ToolOutcome:
    """Execute one pending call of the current turn in this process. In a turn where a call
    may wait for a person, ``waiting.run_held`` runs each call (a call that must wait asks
    ``deps.approver`` first; the Celery shell: ``workers/runs/approvals.py``)."""
    call = next(c for c in state.pending_calls if c.id == call_id)
    view = recorded.turn_view(state).get(call_id, {})
    answered = recorded.carried_out(view, call, now=deps.clock(), worker=worker)
    if answered is not None:  # reused from, or refused by, a recorded ledger: nothing runs
        if state.held_calls:  # its done goes out now, as every call's of such a turn
            await io.publish([loop.emit(state, "step", **done_data(state.iteration, call, answered,
                                                              state.tools_started_at, deps.clock()))])
            answered.announced = True
        return answered
    if state.held_calls:
        return await run_held(state, deps, call, io, worker=worker, reason=view.get("reason"))
    return await execute_call(call, registry=deps.run_registry(state), hooks=deps.hooks, run_id=state.run_id,
                              metadata=state.metadata, clock=deps.clock, worker=worker)


async def tools_step(state: RunState, deps: EngineDeps, io: StepIO) -> Advance:
    """``RunTools`` in one process: every call of the turn concurrently."""
    if len(state.pending_calls) == 1:  # nothing to run beside it: no task to schedule
        outcomes = [await run_tool(state, deps, state.pending_calls[0].id, io)]
    else:
        outcomes = await asyncio.gather(*(run_tool(state, deps, c.id, io) for c in state.pending_calls))
    return await finish_tools(state, deps, io, {o.tool_call_id: o for o in outcomes})


async def finish_tools(state: RunState, deps: EngineDeps, io: StepIO,
                       outcomes: dict[str, ToolOutcome]) -> Advance:
    """The fan-in: all of the turn's outcomes are in; continue the loop."""
    ran = RunTools(tuple(state.pending_calls))
    interrupts = await guard.read_interrupts(state, deps, io)
    events = loop.on_tool_results(state, outcomes, interrupts, deps.config, now=deps.clock())
    return advanced(state, events, ran)


async def answer_step(state: RunState, deps: EngineDeps, io: StepIO, *,
                      published_seq: int = 0) -> Advance:
    """``Answer``: stream the synthesis; on failure fall back to the loop's answer.
    A model without answer synthesis (its registry entry) streams the loop's answer.

    ``published_seq`` > ``state.seq`` means an earlier attempt of this step already streamed
    part of the answer and died: what was sent stays sent and the loop's answer follows,
    exactly as for a stream that broke (so each ``seq`` is published once).

    A run with an ``output_schema`` or an ``ANSWER`` guardrail publishes nothing of its
    answer before it is checked (``answers``).
    """
    if state.answer_ready:
        return await answers.ready_answer_step(state, deps, io)
    if state.output_schema is not None:
        return await answers.typed_answer_step(state, deps, io)
    if deps.hooks.has(HookPoint.ANSWER) and published_seq <= state.seq:
        return await answers.guarded_answer_step(state, deps, io)
    fallback = state.answer or ""
    if published_seq > state.seq:
        state.seq = published_seq
        answer = await _stream_fallback(state, io, fallback, "the worker streaming the answer stopped")
    elif not answer_synthesis(deps.llm):
        # The model's registry entry says its own answer beats its synthesis (a small model
        # rewrites a right "391" into a wrong sentence): stream the loop's answer as it is.
        await io.publish(ending.synthesis_started(state))
        await io.publish([ending.answer_delta(state, c) for c in fallback_chunks(fallback)])
        answer = fallback
    else:
        await io.publish(ending.synthesis_started(state))
        answer = await _stream_synthesis(state, deps, io, fallback)
    leftovers = await io.interrupts(state.interrupt_cursor)
    events = ending.finish(state, answer, now=deps.clock(), pending=[i.content for i in leftovers] or None)
    return advanced(state, events, Answer())


async def _stream_synthesis(state: RunState, deps: EngineDeps, io: StepIO, fallback: str) -> str:
    async def send(delta: str) -> None:
        await io.publish([ending.answer_delta(state, delta)])

    text, failure = await synthesize(state, deps.llm, send)
    if failure is not None:
        return await _stream_fallback(state, io, fallback, failure)
    return text


async def _stream_fallback(state: RunState, io: StepIO, text: str, why: BaseException | str) -> str:
    events = [ending.fallback_event(state, why)]
    events += [ending.answer_delta(state, c) for c in fallback_chunks(text)]
    await io.publish(events)
    return text
