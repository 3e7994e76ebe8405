"""The Celery shell's step logic: load → advance the engine one step → commit → enqueue
what the committed next step needs (one ``match`` on it, ``_enqueue``).

Each function is what one task does; ``workers/runs/tasks.py`` only wires them to Celery.
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
from reactq.shared.stores.due import run_member, tool_member
from reactq.shared.engine.next import (
    Advance, Answer, CallLLM, Done, Next, RunTools, SelectTools, advanced, next_step,
)
from reactq.shared.engine.state import TERMINAL_STATUSES, RunState, ToolOutcome
from reactq.shared.events import Event
from reactq.shared.inprocess import new_state
from reactq.shared.models import ToolCallRequest
from reactq.shared.requests import RunRequest
from reactq.shared.stores.roundtrip import take
from reactq.shared.stores.runs import RunRecord, outcomes_of
from reactq.workers.runs.stepio import LoadedIO, StoreIO
from reactq.shared.errors import CostCapReached, RateLimited
from reactq.shared.wire import ANSWER, ITERATE, RUNS_QUEUE, TOOL, TOOLS_QUEUE
from reactq.shared.webhooks import webhook_id
from reactq.workers import faults, metrics, webhooks
from reactq.workers.runs import flow, listeners, threads
from reactq.workers.runs.listeners import Send
from reactq.workers.runs.cancelwatch import RunCancelled, until_cancelled
from reactq.workers.runtime import Runtime

log = logging.getLogger(__name__)

RUNS, TOOLS = RUNS_QUEUE, TOOLS_QUEUE


def iterate(rt: Runtime, run_id: str, step_no: int | None, send: Send,
            rec: RunRecord | None = None) -> None:
    """Advance a run whose next step is selection, an LLM turn or a fan-in; hand any other
    on (the watchdog resends ``reactq.iterate`` whatever the step). ``rec``: the task's load
    (``RunStore.load_step``), when the lease's round trip brought it.

    Steps that need no other task (selection, an LLM turn that leads to another LLM turn,
    the fan-in followed by the next turn) run back to back in this task: each is committed
    on its own, so a crash loses at most the step in flight, and a turn costs two task hops
    (iterate → tools → iterate) instead of three.
    """
    rec = rec or rt.store.load_step(run_id).run(rt.redis)
    if _stale(rec, step_no):
        return
    state = rec.state or _initial_state(rt, rec)
    if rec.state is None and not threads.prepare(rt, rec, state):
        return
    if rec.waiting_seen and isinstance(next_step(state), RunTools):
        # Approval events were published while the turn was out (shared/stores/approvals_lua.py).
        state.seq = max(state.seq, rec.pub_seq)
    flow.set_message_priority(state)
    io = StoreIO(rt, run_id, rec.cancel)
    current = rec.step_no
    loaded: RunRecord | None = rec  # what the load read serves the task's first step only
    gate: flow.Gate | None = None  # the next LLM turn's, decided before the last commit
    while True:
        began = time.time()
        adv = _advance(rt, state, current, send, io, loaded, gate)
        if adv is None:
            return
        gate, early = _turn_ahead(rt, state, adv, io)
        if not _commit(rt, state, current, adv, send, chain=True, began=began, early=early,
                       turn_began=loaded.turn_began if loaded else None):
            flow.discard(gate)
            if rec.waiting and isinstance(adv.next, Done):
                rt.approvals.cancel_pending(run_id)  # stopped while a person was to decide
            return
        io.published = max([io.published, *(e.seq for e in early)])
        loaded = None
        current = state.step_no


def _turn_ahead(rt: Runtime, state: RunState, adv: Advance, io: StoreIO) -> tuple[flow.Gate | None, list[Event]]:
    """A fan-in that this task follows with the next LLM turn: pass that turn's flow gate
    now and, when it is admitted, send its live ``thinking start`` with the fan-in's commit
    instead of in a round trip of its own (the turn publishes it again: the same seq, not
    sent twice, ``StoreIO.published``). A crash in between leaves what a crash after a live
    publish always left: the redone turn re-creates that seq, and it is not published again."""
    if not isinstance(adv.step, RunTools) or not isinstance(adv.next, CallLLM) or io.cancel:
        return None, []
    if flow.may_stop(rt, state) or state.rate_limited_since is not None:
        return None, []  # the gate would change the state (a budget's ending, a wait's end)
    gate = flow.gate(rt, state, rt.deps_for(state))
    if gate.events is not None or gate.wait is not None:
        return gate, []
    return gate, loop.begin_turn(state.model_copy())  # a shallow copy: the turn itself is not begun


def _advance(rt: Runtime, state: RunState, step_no: int, send: Send, io: StoreIO,
             loaded: RunRecord | None, gate: flow.Gate | None = None) -> Advance | None:
    """Take the run's next step in this task; None when there is nothing to commit here.
    ``gate``: the step's flow gate, when it was passed before the last commit."""
    nxt = next_step(state)
    match nxt:
        case SelectTools() | CallLLM() | RunTools() if io.cancel:
            flow.discard(gate)
            return advanced(state, threads.stop(rt, state, rt.deps_for(state).clock()))
        case SelectTools():
            return _gated(rt, state, steps.select_step, step_no, send, io)
        case CallLLM():
            return _gated(rt, state, steps.llm_step, step_no, send, io, gate)
        case RunTools(calls=calls):
            return _fan_in(rt, state, calls, step_no, send, io, loaded)
        case Answer():
            send(ANSWER, [state.run_id, step_no], RUNS)
            return None
        case Done():
            listeners.run_ended(rt, state, send)  # resumed after a crash that followed the last commit
            return None
        case _:
            assert_never(nxt)


StepFn = Callable[[RunState, steps.EngineDeps, steps.StepIO], Coroutine[Any, Any, Advance]]


def _gated(rt: Runtime, state: RunState, step: StepFn, step_no: int, send: Send,
           io: StoreIO, gate: flow.Gate | None = None) -> Advance | None:
    """Selection or an LLM turn, once the flow gate lets it call its model."""
    gate = gate or flow.gate(rt, state, rt.deps_for(state))
    if gate.events is not None:  # the token budget is used up: the run ends here
        return advanced(state, gate.events)
    if gate.wait is not None:
        _defer(rt, state, step_no, gate.wait, 0, send, ITERATE)
        return None
    try:
        with flow.scoped(gate):
            adv = _llm_or_select(rt, state, step, io)
    except RateLimited as wait:
        _defer_stored(rt, state.run_id, wait, send, ITERATE)
        return None
    if isinstance(adv.next, RunTools) and io.cancel:
        # Asked to stop (cancel, or a newer message on its thread) while the LLM was
        # thinking (the flag as read right after the call): the calls it just made are
        # answered, never sent to a tool.
        stop = threads.stop(rt, state, rt.deps_for(state).clock())
        return advanced(state, adv.events + stop, adv.step)
    return adv


def _cancellable(rt: Runtime, run_id: str, coro: Any) -> Any:
    """``rt.run(coro)``, aborted within ``cancelwatch.POLL`` s of a cancel (``RunCancelled``)."""
    return rt.run(until_cancelled(coro, lambda: rt.store.cancel_requested(run_id)))


def _llm_or_select(rt: Runtime, state: RunState, step: StepFn, io: StoreIO) -> Advance:
    deps = rt.deps_for(state)
    try:
        adv: Advance = _cancellable(rt, state.run_id, step(state, deps, io))
        return adv
    except RateLimited:
        raise  # not a failure: the step is sent again once the model has capacity
    except CostCapReached as cap:  # a dollar cap refused a call of the step: the budget path
        return advanced(state, flow.cap_stop(rt, state, cap, now=deps.clock()))
    except RunCancelled:
        return advanced(state, threads.stop(rt, state, deps.clock()))
    except redis.RedisError:
        raise  # Redis went away mid-step: not the LLM's failure; the step is resumed later
    except Exception as exc:  # An LLM failure ends the run, with a done event
        log.warning("run %s failed: %s", state.run_id, exc)
        return advanced(state, ending.fail(state, exc, now=deps.clock()))


def answer(rt: Runtime, run_id: str, step_no: int | None, send: Send,
           rec: RunRecord | None = None) -> None:
    """Stream the synthesis and finish the run (``rec``: as for ``iterate``)."""
    rec = rec or rt.store.load_step(run_id).run(rt.redis)
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
    adv = _answer_step(rt, state, rec, send)
    if adv is not None:
        _commit(rt, state, rec.step_no, adv, send)


def _answer_step(rt: Runtime, state: RunState, rec: RunRecord, send: Send) -> Advance | None:
    """The synthesis through the flow gate; None when it waits for model capacity."""
    deps = rt.deps_for(state)
    if rec.cancel:
        return advanced(state, threads.stop(rt, state, deps.clock()))
    gate = flow.gate(rt, state, deps)
    if gate.wait is not None:
        _defer(rt, state, rec.step_no, gate.wait, rec.pub_seq, send, ANSWER)
        return None
    if gate.events is not None:
        return advanced(state, gate.events)
    try:
        with flow.scoped(gate):
            adv: Advance = _cancellable(rt, state.run_id, steps.answer_step(
                state, deps, StoreIO(rt, state.run_id), published_seq=rec.pub_seq))
            return adv
    except RateLimited as wait:
        _defer_stored(rt, state.run_id, wait, send, ANSWER)
        return None
    except CostCapReached as cap:
        return advanced(state, flow.cap_stop(rt, state, cap, now=deps.clock()))
    except RunCancelled:
        return advanced(state, threads.stop(rt, state, deps.clock()))
    except redis.RedisError:
        raise
    except Exception as exc:
        return advanced(state, ending.fail(state, exc, now=deps.clock(), kind="internal"))


def _defer(rt: Runtime, state: RunState, step_no: int, wait: RateLimited, published_seq: int,
           send: Send, task: str) -> None:
    """The step waits for model capacity: commit the wait (one ``rate_limited`` event per
    wait), free this worker slot, and send the step again when capacity is expected."""
    events = flow.deferred_events(state, wait, published_seq, now=time.time())
    if _save(rt, state, step_no, advanced(state, events)):
        flow.send_later(rt, task, [state.run_id, state.step_no], RUNS, wait.wait_s, state)


def _defer_stored(rt: Runtime, run_id: str, wait: RateLimited, send: Send, task: str) -> None:
    """A step stopped by ``RateLimited`` half-way: defer it from the last committed state
    (events it already published keep their seqs; the wait's event comes after them)."""
    rec = rt.store.load(run_id)
    state = rec.state or _initial_state(rt, rec)
    _defer(rt, state, rec.step_no, wait, rec.pub_seq, send, task)


def _fan_in(rt: Runtime, state: RunState, calls: tuple[ToolCallRequest, ...], step_no: int,
            send: Send, io: StoreIO, loaded: RunRecord | None) -> Advance | None:
    """All of the turn's outcomes are in ⇒ finishing the turn; else None. ``loaded``: the
    task's load, with the turn's ledger records and the interrupts (no round trip here)."""
    ids = [c.id for c in calls]
    if loaded is not None and loaded.ledger is not None:
        outcomes = outcomes_of(loaded.ledger, ids)
    else:
        outcomes = rt.store.ledger_outcomes(state.run_id, ids)
    if len(outcomes) < len(calls):
        # Resumed by the watchdog before every tool reported: send what nobody is running
        # (a call that waits for a person is sent by its decision).
        waiting = _waiting_calls(loaded)
        for call in calls:
            if call.id not in outcomes and call.id not in waiting \
                    and not rt.leases.alive(tool_member(state.run_id, call.id)):
                send(TOOL, [state.run_id, step_no, call.id, call.name], TOOLS)
        return None
    deps = rt.deps_for(state)
    events = _uncertain_events(state, outcomes) + _crashed_events(state, outcomes)
    step_io: steps.StepIO = io if loaded is None or loaded.interrupts is None else LoadedIO(io, loaded.interrupts)
    adv: Advance = rt.run(steps.finish_tools(state, deps, step_io, outcomes))
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
    return [loop.emit(state, "error", kind="tool_crashed", tool_call_id=o.tool_call_id,
                      tool_name=o.tool_name, message=o.error or "")
            for o in outcomes.values() if o.crashed]


def _commit(rt: Runtime, state: RunState, step_no: int, adv: Advance, send: Send, *,
            chain: bool = False, began: float | None = None, turn_began: float | None = None,
            early: list[Event] | None = None) -> bool:
    """Save the step, then carry out what comes next. True when this task goes on with it
    itself (``chain``: selection and LLM turns); False otherwise, or when the step was stale.
    A step after which this task only sends the next task (tools, the synthesis) or nothing
    (a run that ends with no end-of-run listener to tell, nor a wait) hands its lease over in the
    commit's round trip: the commit's due record covers the sends."""
    handoff = isinstance(adv.next, RunTools | Answer) or (
        isinstance(adv.next, Done) and state.rate_limited_since is None and not listeners.wanted(state))
    return (_save(rt, state, step_no, adv, began, turn_began=turn_began, handoff=handoff, early=early)
            and _enqueue(rt, state, adv.next, send, chain=chain))


def _save(rt: Runtime, state: RunState, step_no: int, adv: Advance, began: float | None = None, *,
          turn_began: float | None = None, handoff: bool = False, early: list[Event] | None = None) -> bool:
    """Commit the step (compare-and-set on ``step_no``) with its metrics, the lease's release
    (``handoff``), the step's deferred writes and ``early``, live events of the next step
    (published, not part of the saved state), in one round trip; False when it was stale."""
    ops = metrics.commit_ops(rt.recorder, state, step_no, adv, began, turn_began)
    release = rt.leases.handoff() if handoff else None
    then = ([release] if release is not None else []) + take()
    if state.webhook_on_done and isinstance(adv.next, Done):  # in the commit's round trip
        then.append(webhooks.store(rt).arm_op(webhook_id("run", state.run_id)))
    if not rt.store.commit(state.run_id, state, step_no, adv.events + (early or []), ops=ops, then=then,
                           turn_began=began if isinstance(adv.next, RunTools) else None):
        log.info("run %s step %s was already committed elsewhere", state.run_id, step_no)
        return False
    faults.point("after_commit")
    return True


def _enqueue(rt: Runtime, state: RunState, nxt: Next, send: Send, *, chain: bool) -> bool:
    """Send what the committed next step needs (a finished run: its end-of-run listeners).
    True when, with ``chain``, this task takes the step itself instead."""
    match nxt:
        case SelectTools() | CallLLM():
            if chain:
                return True
            send(ITERATE, [state.run_id, state.step_no], RUNS)
        case RunTools(calls=calls):
            for call in calls:
                # The tool name rides along for Flower; the task reads the call from Redis.
                send(TOOL, [state.run_id, state.step_no, call.id, call.name], TOOLS)
        case Answer():
            send(ANSWER, [state.run_id, state.step_no], RUNS)
        case Done():
            listeners.run_ended(rt, state, send)
        case _:
            assert_never(nxt)
    return False


def _stale(rec: RunRecord, step_no: int | None) -> bool:
    """A delivery for a step the run has already passed (None = resume whatever is current)."""
    return step_no is not None and step_no != rec.step_no


def _initial_state(rt: Runtime, rec: RunRecord) -> RunState:
    request = RunRequest.model_validate(rec.request)
    deps = rt.deps_for(None, request.model)
    state = new_state(request, deps, run_id=rec.run_id)
    state.tenant = rec.tenant
    return state


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
    state = rec.state or _initial_state(rt, rec)
    # The crashed step may have published live events (``thinking`` start, answer deltas)
    # past the saved state; they stay published, and the ending follows them (else its
    # seqs would be skipped as already published and the run would end without ``done``).
    state.seq = max(state.seq, rec.pub_seq)
    events = ending.fail(state, crash_text("The run's next step", crashes, rt), now=time.time(),
                         kind="task_crashed")
    _commit(rt, state, rec.step_no, advanced(state, events), send)
