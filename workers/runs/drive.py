"""The Celery shell's step logic: load → advance the engine one step → commit → enqueue
what the committed next step needs (one ``match`` on it, ``step.enqueue``).

Each public function is what one task does; ``workers/runs/tasks.py`` only wires them to
Celery. A task builds its step context (``workers/runs/step.py``: ``Step``) once from its
load, and the helpers here take that instead of the runtime, the state, the step number,
the I/O and ``send`` one by one.
Every function is safe to run twice for the same step: a stale ``step_no`` is a no-op,
``commit`` is compare-and-set, events are published by seq, and the tool ledger makes a
recorded tool call never run again.

Round trips. A task's load (``RunStore.load_step``: the run, its cancel flag, the interrupts
after the committed cursor, the ledger records of a pending turn) shares the round trip of
the lease (``tasks.py``); each step then commits once, and the commit carries the step's
metrics and, when it ends the task's work, the lease's release (``Leases.handoff``). Between
the two, a step that calls its LLM makes two more: the live ``thinking start`` before the
call (watchers see it at once, not with the commit) and one read after it (interrupts the
user sent meanwhile and the cancel flag), which also carries what the call deferred (the
flow limiter's settle, the token spend, metrics: ``reactq.shared.stores.roundtrip``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any, assert_never

import redis

from reactq.shared.engine import ending, loop, steps
from reactq.shared.engine.deps import EngineDeps, StepIO
from reactq.shared.stores.due import run_member, tool_member
from reactq.shared.engine.next import Advance, Answer, CallLLM, Done, RunTools, SelectTools, next_step
from reactq.shared.engine.state import TERMINAL_STATUSES, RunState, ToolOutcome
from reactq.shared.events import Event
from reactq.shared.models import ToolCallRequest
from reactq.shared.stores.run_hash import RunRecord, outcomes_of
from reactq.workers.runs.stepio import LoadedIO
from reactq.shared.errors import CostCapReached, RateLimited
from reactq.shared.wire import ANSWER, ITERATE, TOOL
from reactq.workers.runs import flow, listeners, threads
from reactq.workers.runs.listeners import Send
from reactq.workers.runs.cancelwatch import RunCancelled, until_cancelled
from reactq.workers.runs.step import RUNS, TOOLS, Step, commit, defer, defer_stored, start
from reactq.workers.runtime import Runtime

log = logging.getLogger(__name__)

__all__ = ["RUNS", "TOOLS", "answer", "crash_text", "end_crashed_run", "give_up_run", "iterate"]


def iterate(rt: Runtime, rec: RunRecord, step_no: int | None, send: Send) -> None:
    """Advance a run whose next step is selection, an LLM turn or a fan-in; hand any other
    on (the watchdog resends ``reactq.iterate`` whatever the step). ``rec``: the task's load
    (``RunStore.load_step``, in the lease's round trip).

    Steps that need no other task (selection, an LLM turn that leads to another LLM turn,
    the fan-in followed by the next turn) run back to back in this task: each is committed
    on its own, so a crash loses at most the step in flight, and a turn costs two task hops
    (iterate → tools → iterate) instead of three.
    """
    if _stale(rec, step_no):
        return
    step = start(rt, rec, send, ITERATE)
    if rec.state is None and not threads.prepare(rt, rec, step.state):
        return
    if (rec.waiting_seen or step.state.held_calls) and isinstance(next_step(step.state), RunTools):
        # Approval events, and the calls' own events of a turn with held calls, were published
        # while the turn was out (shared/stores/approvals_lua.py).
        step.state.seq = max(step.state.seq, rec.pub_seq)
    flow.set_message_priority(step.state)
    gate: flow.Gate | None = None  # the next LLM turn's, decided before the last commit
    while True:
        step.began = time.time()
        adv = _advance(step, gate)
        if adv is None:
            return
        gate, early = _turn_ahead(step, adv)
        if not commit(step, adv, chain=True, early=early):
            flow.discard(gate)
            if rec.waiting and isinstance(adv.next, Done):
                rt.approvals.cancel_pending(rec.run_id)  # stopped while a person was to decide
            return
        step.io.published = max([step.io.published, *(e.seq for e in early)])
        step.loaded = None  # what the load read serves the task's first step only
        step.step_no = step.state.step_no


def _turn_ahead(step: Step, adv: Advance) -> tuple[flow.Gate | None, list[Event]]:
    """A fan-in that this task follows with the next LLM turn: pass that turn's flow gate
    now and, when it is admitted, send its live ``thinking start`` with the fan-in's commit
    instead of in a round trip of its own (the turn publishes it again: the same seq, not
    sent twice, ``StoreIO.published``). A crash in between leaves what a crash after a live
    publish always left: the redone turn re-creates that seq, and it is not published again."""
    if not isinstance(adv.step, RunTools) or not isinstance(adv.next, CallLLM) or step.io.cancel:
        return None, []
    if flow.may_stop(step.rt, step.state) or step.state.rate_limited_since is not None:
        return None, []  # the gate would change the state (a budget's ending, a wait's end)
    gate = flow.gate(step.rt, step.state, step.deps)
    if gate.events is not None or gate.wait is not None:
        return gate, []
    return gate, loop.begin_turn(step.state.model_copy())  # a shallow copy: the turn itself is not begun


def _advance(step: Step, gate: flow.Gate | None) -> Advance | None:
    """Take the run's next step in this task; None when there is nothing to commit here.
    ``gate``: the step's flow gate, when it was passed before the last commit."""
    nxt = next_step(step.state)
    match nxt:
        case SelectTools() | CallLLM() | RunTools() if step.io.cancel:
            flow.discard(gate)
            return step.stop()
        case SelectTools():
            return _gated(step, steps.select_step)
        case CallLLM():
            return _gated(step, steps.llm_step, gate)
        case RunTools(calls=calls):
            return _fan_in(step, calls)
        case Answer():
            step.send(ANSWER, [step.run_id, step.step_no], RUNS)
            return None
        case Done():
            listeners.run_ended(step.rt, step.state, step.send)  # resumed after a crash that followed the last commit
            return None
        case _:
            assert_never(nxt)


StepFn = Callable[[RunState, EngineDeps, StepIO], Coroutine[Any, Any, Advance]]


def _gated(step: Step, fn: StepFn, gate: flow.Gate | None = None) -> Advance | None:
    """Selection or an LLM turn (``fn``), once the flow gate lets it call its model."""
    gate = gate or flow.gate(step.rt, step.state, step.deps)
    if gate.events is not None:  # the token budget is used up: the run ends here
        return step.advanced(gate.events)
    if gate.wait is not None:
        defer(step, gate.wait, 0)
        return None
    try:
        with flow.scoped(gate):
            adv = _llm_or_select(step, fn)
    except RateLimited as wait:
        defer_stored(step, wait)
        return None
    if isinstance(adv.next, RunTools) and step.io.cancel:
        # Asked to stop (cancel, or a newer message on its thread) while the LLM was
        # thinking (the flag as read right after the call): the calls it just made are
        # answered, never sent to a tool.
        return step.advanced(adv.events + step.stop().events, adv.step)
    return adv


def _cancellable(step: Step, coro: Coroutine[Any, Any, Advance]) -> Advance:
    """``rt.run(coro)``, aborted within ``cancelwatch.POLL`` s of a cancel (``RunCancelled``)."""
    rt, run_id = step.rt, step.run_id
    adv: Advance = rt.run(until_cancelled(coro, lambda: rt.store.cancel_requested(run_id)))
    return adv


def _llm_or_select(step: Step, fn: StepFn) -> Advance:
    deps = step.deps
    try:
        return _cancellable(step, fn(step.state, deps, step.io))
    except RateLimited:
        raise  # not a failure: the step is sent again once the model has capacity
    except CostCapReached as cap:  # a dollar cap refused a call of the step: the budget path
        return step.advanced(flow.cap_stop(step.rt, step.state, cap, now=deps.clock()))
    except RunCancelled:
        return step.stop()
    except redis.RedisError:
        raise  # Redis went away mid-step: not the LLM's failure; the step is resumed later
    except Exception as exc:  # An LLM failure ends the run, with a done event
        log.warning("run %s failed: %s", step.run_id, exc)
        return step.fail(exc)


def answer(rt: Runtime, rec: RunRecord, step_no: int | None, send: Send) -> None:
    """Stream the synthesis and finish the run (``rec``: as for ``iterate``)."""
    state = rec.state
    if state is None or _stale(rec, step_no):
        return
    nxt = next_step(state)
    if isinstance(nxt, Done) and step_no is None:
        listeners.run_ended(rt, state, send)  # resumed after a crash that followed the last commit
        return
    if not isinstance(nxt, Answer):
        return
    flow.set_message_priority(state)
    step = start(rt, rec, send, ANSWER)
    adv = _answer_step(step, rec.pub_seq)
    if adv is not None:
        commit(step, adv)


def _answer_step(step: Step, published_seq: int) -> Advance | None:
    """The synthesis through the flow gate; None when it waits for model capacity."""
    if step.io.cancel:
        return step.stop()
    if step.state.answer_ready:  # the budget's summary: no model call, only its guardrails
        return _cancellable(step, steps.answer_step(step.state, step.deps, step.io))
    gate = flow.gate(step.rt, step.state, step.deps)
    if gate.wait is not None:
        defer(step, gate.wait, published_seq)
        return None
    if gate.events is not None:
        return step.advanced(gate.events)
    try:
        with flow.scoped(gate):
            return _cancellable(step, steps.answer_step(step.state, step.deps, step.io,
                                                        published_seq=published_seq))
    except RateLimited as wait:
        defer_stored(step, wait)
        return None
    except CostCapReached as cap:
        return step.advanced(flow.cap_stop(step.rt, step.state, cap, now=step.deps.clock()))
    except RunCancelled:
        return step.stop()
    except redis.RedisError:
        raise
    except Exception as exc:
        return step.fail(exc, kind="internal")


def _fan_in(step: Step, calls: tuple[ToolCallRequest, ...]) -> Advance | None:
    """All of the turn's outcomes are in ⇒ finishing the turn; else None. The task's load
    (``step.loaded``) has the turn's ledger records and the interrupts (no round trip here)."""
    loaded, state = step.loaded, step.state
    ids = [c.id for c in calls]
    if loaded is not None and loaded.ledger is not None:
        outcomes = outcomes_of(loaded.ledger, ids)
    else:
        outcomes = step.rt.store.ledger_outcomes(state.run_id, ids)
    if len(outcomes) < len(calls):
        # Resumed by the watchdog before every tool reported: send what nobody is running
        # (a call that waits for a person is sent by its decision).
        waiting = _waiting_calls(loaded)
        for call in calls:
            if call.id not in outcomes and call.id not in waiting \
                    and not step.rt.leases.alive(tool_member(state.run_id, call.id)):
                step.send(TOOL, [state.run_id, step.step_no, call.id, call.name], TOOLS)
        return None
    events = _uncertain_events(state, outcomes) + _crashed_events(state, outcomes)
    step_io: StepIO = step.io if loaded is None or loaded.interrupts is None \
        else LoadedIO(step.io, loaded.interrupts)
    adv: Advance = step.rt.run(steps.finish_tools(state, step.deps, step_io, outcomes))
    return replace(adv, events=events + adv.events)


def _waiting_calls(loaded: RunRecord | None) -> set[str]:
    ledger = loaded.ledger if loaded is not None and loaded.ledger is not None else {}
    return {cid for cid, rec in ledger.items() if rec.get("status") == "waiting"}


def _uncertain_events(state: RunState, outcomes: dict[str, ToolOutcome]) -> list[Event]:
    return [
        loop.emit(state, "error", kind="tool_uncertain", tool_call_id=o.tool_call_id,
                  tool_name=o.tool_name,
                  message=f"Tool '{o.tool_name}' may or may not have run: its worker stopped "
                          "mid-call and the tool is not idempotent, so it was not re-run.")
        for o in outcomes.values() if o.uncertain
    ]


def _crashed_events(state: RunState, outcomes: dict[str, ToolOutcome]) -> list[Event]:
    """A call not run: its worker died too often, or no live worker offers its tool."""
    return [loop.emit(state, "error", kind="tool_unavailable" if o.unavailable else "tool_crashed",
                      tool_call_id=o.tool_call_id, tool_name=o.tool_name, message=o.error or "")
            for o in outcomes.values() if o.crashed or o.unavailable]


def _stale(rec: RunRecord, step_no: int | None) -> bool:
    """A delivery for a step the run has already passed (None = resume whatever is current)."""
    return step_no is not None and step_no != rec.step_no


# -- the crash limit (workers/recovery/watchdog.py counts; these end what must not be sent again) --------

def crash_text(what: str, crashes: int, rt: Runtime) -> str:
    return (f"{what} was not run again: the worker running it stopped {crashes} times "
            f"(killed or hung), so it is treated as a poison pill "
            f"(REACTQ_MAX_TASK_CRASHES={rt.settings.max_task_crashes}).")


def give_up_run(rt: Runtime, run_id: str, crashes: int, send: Send) -> None:
    """End the run ``failed`` (``error`` kind ``task_crashed``, then ``done``)."""
    with rt.leases.hold_only(run_member(run_id), ITERATE, [run_id, None], RUNS, wait=0) as held:
        if held:
            end_crashed_run(rt, run_id, crashes, send)


def end_crashed_run(rt: Runtime, run_id: str, crashes: int, send: Send) -> None:
    """``give_up_run`` for a caller that holds the run's lease."""
    rec = rt.store.load(run_id)
    if rec.status in TERMINAL_STATUSES:
        return
    step = start(rt, rec, send, ITERATE)
    state = step.state
    # The crashed step may have published live events (``thinking`` start, answer deltas)
    # past the saved state; they stay published, and the ending follows them (else its
    # seqs would be skipped as already published and the run would end without ``done``).
    state.seq = max(state.seq, rec.pub_seq)
    events = ending.fail(state, crash_text("The run's next step", crashes, rt), now=time.time(),
                         kind="task_crashed")
    commit(step, step.advanced(events))
