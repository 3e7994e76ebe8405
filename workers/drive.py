"""The Celery shell's step logic: load → advance the engine one step → commit → enqueue.

Each function is what one task does; ``workers/tasks.py`` only wires them to Celery.
Every function is safe to run twice for the same step: a stale ``step_no`` is a no-op,
``commit`` is compare-and-set, events are published by seq, and the tool ledger makes a
recorded tool call never run again.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

from reactq.shared import otel
from reactq.shared.engine import loop, prompts, steps
from reactq.shared.engine.state import Interrupt, RunState, ToolOutcome
from reactq.shared.events import Event
from reactq.shared.inprocess import new_state
from reactq.shared.models import ToolCallRequest
from reactq.shared.requests import RunRequest
from reactq.shared.store import RunRecord
from reactq.shared.errors import RateLimited
from reactq.shared.wire import ANSWER, DAG_STEP_DONE, ITERATE, RUNS_QUEUE, TOOL, TOOLS_QUEUE
from reactq.workers import faults, flow, metrics, threads
from reactq.workers.cancelwatch import RunCancelled, until_cancelled
from reactq.workers.runtime import Runtime

log = logging.getLogger(__name__)

Send = Callable[[str, list[Any], str], None]
RUNS, TOOLS = RUNS_QUEUE, TOOLS_QUEUE


class StoreIO:
    """StepIO over the run store: live events are published at once (guarded by seq)."""

    def __init__(self, rt: Runtime, run_id: str) -> None:
        self.rt = rt
        self.run_id = run_id

    async def publish(self, events: list[Event]) -> None:
        self.rt.store.publish(self.run_id, events)

    async def interrupts(self, after: str | None) -> list[Interrupt]:
        return self.rt.store.interrupts_after(self.run_id, after)


def iterate(rt: Runtime, run_id: str, step_no: int | None, send: Send) -> None:
    """Advance a run in phase select / llm / tools (fan-in), or hand it to the right task.

    Steps that need no other task (selection, an LLM turn that leads to another LLM turn,
    the fan-in followed by the next turn) run back to back in this task: each is committed
    on its own, so a crash loses at most the step in flight, and a turn costs two task hops
    (iterate → tools → iterate) instead of three.
    """
    rec = rt.store.load(run_id)
    if _stale(rec, step_no):
        return
    if rec.state is not None and rec.state.phase == "done":
        threads.ended(rt, rec.state, send)  # resumed after a crash that followed the last commit
        return
    state = rec.state or _initial_state(rt, rec)
    if rec.state is None and not threads.prepare(rt, rec, state):
        return
    flow.set_message_priority(state)
    current = rec.step_no
    while state.phase in ("select", "llm", "tools"):
        if rt.store.cancel_requested(run_id):
            _commit(rt, state, current, threads.stop(rt, state, rt.deps_for(state).clock()), send)
            return
        began = time.time()
        if state.phase == "tools":
            events = _fan_in(rt, state, current, send)
        else:
            gate = flow.gate(rt, state, rt.deps_for(state))
            if gate.events is not None:  # the token budget is used up: the run ends here
                _commit(rt, state, current, gate.events, send)
                return
            if gate.wait is not None:
                _defer(rt, state, current, gate.wait, 0, send, ITERATE)
                return
            try:
                with flow.scoped(gate):
                    events = _llm_or_select(rt, state)
            except RateLimited as wait:
                _defer_stored(rt, run_id, wait, send, ITERATE)
                return
        if events is None:
            return  # tools still running: their last one sends the next iterate
        if state.phase == "tools" and rt.store.cancel_requested(run_id):
            # Asked to stop (cancel, or a newer message on its thread) while the LLM was
            # thinking: the calls it just made are answered, never sent to a tool.
            events += threads.stop(rt, state, rt.deps_for(state).clock())
        if not _commit(rt, state, current, events, send, chain=True, began=began):
            return
        if state.phase == "tools":
            return  # _commit sent the tool tasks; the last to finish sends the fan-in
        current = state.step_no
    if state.phase == "answer":
        send(ANSWER, [run_id, current], RUNS)


def _cancellable(rt: Runtime, run_id: str, coro: Any) -> Any:
    """``rt.run(coro)``, aborted within ``cancelwatch.POLL`` s of a cancel (``RunCancelled``)."""
    return rt.run(until_cancelled(coro, lambda: rt.store.cancel_requested(run_id)))


def _llm_or_select(rt: Runtime, state: RunState) -> list[Event]:
    deps = rt.deps_for(state)
    step = steps.select_step if state.phase == "select" else steps.llm_step
    try:
        return _cancellable(rt, state.run_id, step(state, deps, StoreIO(rt, state.run_id)))
    except RateLimited:
        raise  # not a failure: the step is sent again once the model has capacity
    except RunCancelled:
        return threads.stop(rt, state, deps.clock())
    except redis.RedisError:
        raise  # Redis went away mid-step: not the LLM's failure; the step is resumed later
    except Exception as exc:  # S64: an LLM failure ends the run, with a done event
        log.warning("run %s failed: %s", state.run_id, exc)
        return loop.fail(state, exc, now=deps.clock())


def answer(rt: Runtime, run_id: str, step_no: int | None, send: Send) -> None:
    """Stream the synthesis and finish the run."""
    rec = rt.store.load(run_id)
    if rec.state is not None and rec.state.phase == "done" and step_no is None:
        threads.ended(rt, rec.state, send)  # resumed after a crash that followed the last commit
        return
    if _stale(rec, step_no) or rec.state is None or rec.state.phase != "answer":
        return
    state = rec.state
    flow.set_message_priority(state)
    deps = rt.deps_for(state)
    if rec.cancel:
        events = threads.stop(rt, state, deps.clock())
    else:
        gate = flow.gate(rt, state, deps)
        if gate.wait is not None:
            _defer(rt, state, rec.step_no, gate.wait, rec.pub_seq, send, ANSWER)
            return
        if gate.events is not None:
            events = gate.events
        else:
            try:
                with flow.scoped(gate):
                    events = _cancellable(rt, run_id, steps.answer_step(state, deps, StoreIO(rt, run_id),
                                                                        published_seq=rec.pub_seq))
            except RateLimited as wait:
                _defer_stored(rt, run_id, wait, send, ANSWER)
                return
            except RunCancelled:
                events = threads.stop(rt, state, deps.clock())
            except redis.RedisError:
                raise
            except Exception as exc:
                events = loop.fail(state, exc, now=deps.clock(), kind="internal")
    _commit(rt, state, rec.step_no, events, send)


def _defer(rt: Runtime, state: RunState, step_no: int, wait: RateLimited, published_seq: int,
           send: Send, task: str) -> None:
    """The step waits for model capacity: commit the wait (one ``rate_limited`` event per
    wait), free this worker slot, and send the step again when capacity is expected."""
    events = flow.deferred_events(state, wait, published_seq, now=time.time())
    if _commit(rt, state, step_no, events, send, chain=True):
        flow.send_later(rt, task, [state.run_id, state.step_no], RUNS, wait.wait_s, state)


def _defer_stored(rt: Runtime, run_id: str, wait: RateLimited, send: Send, task: str) -> None:
    """A step stopped by ``RateLimited`` half-way: defer it from the last committed state
    (events it already published keep their seqs; the wait's event comes after them)."""
    rec = rt.store.load(run_id)
    state = rec.state or _initial_state(rt, rec)
    _defer(rt, state, rec.step_no, wait, rec.pub_seq, send, task)


def tool(rt: Runtime, run_id: str, step_no: int, call_id: str, send: Send) -> None:
    """Run one tool call of a turn (unless the ledger has it), then count it in."""
    turn = rt.store.get_turn(run_id)
    if not turn or turn["step_no"] != step_no:
        return  # the turn is over: a late duplicate
    calls = [ToolCallRequest.model_validate(c) for c in turn["calls"]]
    call = next((c for c in calls if c.id == call_id), None)
    if call is None:
        return
    record = rt.store.ledger_get(run_id, call_id)
    if record is None or record["status"] != "done":
        outcome = _execute_once(rt, run_id, step_no, call, turn, record)
        if rt.store.ledger_done(run_id, call_id, outcome, step_no):
            metrics.record_tool(rt, outcome)
        else:  # another worker finished it while this one was cut off: its result stands
            log.warning("tool call %s of run %s was already done elsewhere; result dropped", call_id, run_id)
    if rt.store.fanin(run_id, step_no, call_id, len(calls)) >= len(calls):
        send(ITERATE, [run_id, step_no], RUNS)


def _execute_once(rt: Runtime, run_id: str, step_no: int, call: ToolCallRequest,
                  turn: dict[str, Any], record: dict[str, Any] | None) -> ToolOutcome:
    registry = rt.tools.filtered(turn["tool_names"])
    if record is not None and call.name in registry and not registry.get(call.name).idempotent:
        # An earlier delivery started this call and died: its effect is unknown, and a
        # non-idempotent tool must not silently run twice.
        return ToolOutcome(tool_call_id=call.id, tool_name=call.name, error=prompts.UNCERTAIN_OBSERVATION,
                           uncertain=True, worker=rt.worker_name)
    if record is None:
        rt.store.ledger_claim(run_id, call.id, uuid.uuid4().hex, step_no)
    from reactq.shared.engine.toolexec import execute_call

    with otel.tool_span(call.name, call.id, run_id) as span:
        outcome = rt.run(execute_call(call, registry=registry, hooks=rt.hooks, run_id=run_id,
                                      metadata=turn.get("metadata") or {}, worker=rt.worker_name))
        otel.tool_outcome(span, outcome.error, outcome.blocked, outcome.uncertain)
    return outcome


def _fan_in(rt: Runtime, state: RunState, step_no: int, send: Send) -> list[Event] | None:
    """All of the turn's outcomes are in ⇒ the events of finishing the turn; else None."""
    ids = [c.id for c in state.pending_calls]
    outcomes = rt.store.ledger_outcomes(state.run_id, ids)
    if len(outcomes) < len(ids):
        # Resumed by the watchdog before every tool reported: send what nobody is running.
        for call in state.pending_calls:
            if call.id not in outcomes and not rt.leases.alive(f"tool:{state.run_id}:{call.id}"):
                send(TOOL, [state.run_id, step_no, call.id, call.name], TOOLS)
        return None
    deps = rt.deps_for(state)
    events = _uncertain_events(state, outcomes) + _crashed_events(state, outcomes)
    return events + rt.run(steps.finish_tools(state, deps, StoreIO(rt, state.run_id), outcomes))


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


def _commit(rt: Runtime, state: RunState, step_no: int, events: list[Event], send: Send,
            *, chain: bool = False, began: float | None = None) -> bool:
    """Save the step; then enqueue what comes next. With ``chain``, steps that this task
    continues itself (select / llm) are not enqueued. False when the step was stale."""
    if not rt.store.commit(state.run_id, state, step_no, events):
        log.info("run %s step %s was already committed elsewhere", state.run_id, step_no)
        return False
    metrics.on_commit(rt, state, step_no, events, began)
    if state.phase == "done" and state.rate_limited_since is not None:
        flow.unpark(rt, state.run_id)  # ended while waiting (cancelled): nothing to resume
    faults.point("after_commit")
    if not (chain and state.phase in ("select", "llm", "answer")):
        schedule(state, send)
    if state.phase == "done":
        threads.ended(rt, state, send)  # a run that ends for any reason hands its thread on
    return True


def schedule(state: RunState, send: Send) -> None:
    """Enqueue what the state's phase needs next (for a finished DAG step: its DAG)."""
    if state.phase == "done":
        parent = state.metadata.get("_dag")
        if isinstance(parent, dict):
            send(DAG_STEP_DONE, [parent["dag_id"], parent["step_id"], state.run_id], RUNS)
    elif state.phase in ("select", "llm"):
        send(ITERATE, [state.run_id, state.step_no], RUNS)
    elif state.phase == "tools":
        for call in state.pending_calls:
            # The tool name rides along for Flower; the task reads the call from Redis.
            send(TOOL, [state.run_id, state.step_no, call.id, call.name], TOOLS)
    elif state.phase == "answer":
        send(ANSWER, [state.run_id, state.step_no], RUNS)


def _stale(rec: RunRecord, step_no: int | None) -> bool:
    """A delivery for a step the run has already passed (None = resume whatever is current)."""
    return step_no is not None and step_no != rec.step_no


def _initial_state(rt: Runtime, rec: RunRecord) -> RunState:
    request = RunRequest.model_validate(rec.request)
    deps = rt.deps_for(None, request.model)
    return new_state(request, deps, run_id=rec.run_id)


# -- the crash limit (workers/due.py counts; these end what must not be sent again) --------

def _crash_text(what: str, crashes: int, rt: Runtime) -> str:
    return (f"{what} was not run again: the worker running it stopped {crashes} times "
            f"(killed or hung), so it is treated as a poison pill "
            f"(REACTQ_MAX_TASK_CRASHES={rt.settings.max_task_crashes}).")


def turn_call(turn: dict[str, Any] | None, call_id: str) -> ToolCallRequest | None:
    for c in (turn or {}).get("calls", []):
        if c.get("id") == call_id:
            return ToolCallRequest.model_validate(c)
    return None


def give_up_run(rt: Runtime, run_id: str, crashes: int, send: Send) -> None:
    """End the run ``failed`` (``error`` kind ``task_crashed``, then ``done``)."""
    with rt.leases.hold(f"run:{run_id}", ITERATE, [run_id, None], RUNS, wait=0) as held:
        if held:
            end_crashed_run(rt, run_id, crashes, send)


def end_crashed_run(rt: Runtime, run_id: str, crashes: int, send: Send) -> None:
    """``give_up_run`` for a caller that holds the run's lease."""
    rec = rt.store.load(run_id)
    if rec.status in ("succeeded", "failed", "cancelled"):
        return
    state = rec.state or _initial_state(rt, rec)
    # The crashed step may have published live events (``thinking`` start, answer deltas)
    # past the saved state; they stay published, and the ending follows them (else its
    # seqs would be skipped as already published and the run would end without ``done``).
    state.seq = max(state.seq, rec.pub_seq)
    events = loop.fail(state, _crash_text("The run's next step", crashes, rt), now=time.time(),
                       kind="task_crashed")
    _commit(rt, state, rec.step_no, events, send)


def give_up_tool(rt: Runtime, run_id: str, step_no: int, call: ToolCallRequest, crashes: int,
                 send: Send) -> None:
    """Answer the call with an error observation (``tool_crashed``) and count it in."""
    spec = [run_id, step_no, call.id, call.name]
    with rt.leases.hold(f"tool:{run_id}:{call.id}", TOOL, spec, TOOLS, wait=0) as held:
        if held:
            end_crashed_tool(rt, run_id, step_no, call, crashes, send)


def end_crashed_tool(rt: Runtime, run_id: str, step_no: int, call: ToolCallRequest, crashes: int,
                     send: Send) -> None:
    """``give_up_tool`` for a caller that holds the call's lease."""
    turn = rt.store.get_turn(run_id)
    if not turn or turn["step_no"] != step_no:
        return
    record = rt.store.ledger_get(run_id, call.id)
    if record is None or record["status"] != "done":
        text = _crash_text(f"Tool '{call.name}'", crashes, rt)
        outcome = ToolOutcome(tool_call_id=call.id, tool_name=call.name, error=text, crashed=True,
                              worker=rt.worker_name)
        rt.store.ledger_done(run_id, call.id, outcome, step_no)
    n = len(turn["calls"])
    if rt.store.fanin(run_id, step_no, call.id, n) >= n:
        send(ITERATE, [run_id, step_no], RUNS)
