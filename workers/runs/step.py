"""What one task of the Celery shell knows about the step it is taking (``Step``), and the two
ways a step ends: committed (``commit``, then ``enqueue``: what the next step needs is sent)
or deferred until its model has capacity (``defer``).

A task builds its ``Step`` once, from its load (``workers/runs/drive.py``: ``iterate``,
``answer``); the functions here and in ``drive`` take it instead of the runtime, the run's
state, the step number, the I/O and the ``send`` one by one.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from functools import cached_property
from typing import assert_never

from reactq.shared.engine import ending
from reactq.shared.engine.next import Advance, Answer, CallLLM, Done, Next, RunTools, SelectTools, advanced
from reactq.shared.engine.state import RunState
from reactq.shared.engine.deps import EngineDeps
from reactq.shared.errors import RateLimited
from reactq.shared.events import Event
from reactq.shared.engine.recorded import ReplayPolicy
from reactq.shared.inprocess import new_state
from reactq.shared.stores.recorded import load_recorded
from reactq.shared.requests import RunRequest
from reactq.shared import transport
from reactq.shared.stores.roundtrip import take
from reactq.shared.stores.run_hash import RunRecord
from reactq.shared.webhooks import webhook_id
from reactq.shared.wire import ANSWER, ITERATE, RUNS_QUEUE, TOOL, TOOLS_QUEUE
from reactq.workers import faults, metrics, webhooks
from reactq.workers.runs import flow, listeners, threads
from reactq.workers.runs.listeners import Send
from reactq.workers.runs.stepio import StoreIO
from reactq.workers.runtime import Runtime

log = logging.getLogger(__name__)

RUNS, TOOLS = RUNS_QUEUE, TOOLS_QUEUE


@dataclass
class Step:
    """One task's view of a run, built once when the task starts; a task that takes steps back
    to back moves ``step_no`` (and clears ``loaded``) after each commit."""

    rt: Runtime
    state: RunState
    step_no: int
    """The committed step the task is on (the commit's compare-and-set)."""
    send: Send
    io: StoreIO
    task: str
    """The task this step is sent again as when it waits for capacity (``iterate``, ``answer``)."""
    loaded: RunRecord | None = None
    """The task's load, which serves its first step only (the turn's ledger, interrupts)."""
    began: float | None = None
    """When the step in flight began (metrics: an LLM turn's duration)."""

    @property
    def run_id(self) -> str:
        return self.state.run_id

    @cached_property
    def deps(self) -> EngineDeps:
        """The run's engine dependencies (``DepsCache``: built once per model and thread)."""
        return self.rt.deps_for(self.state)

    def advanced(self, events: list[Event], step: Next | None = None) -> Advance:
        return advanced(self.state, events, step)

    def stop(self) -> Advance:
        """Stopped from outside the loop: a cancel, or a newer message on the run's thread."""
        return self.advanced(threads.stop(self.rt, self.state, self.deps.clock()))

    def fail(self, exc: BaseException, kind: str = "llm_error") -> Advance:
        return self.advanced(ending.fail(self.state, exc, now=self.deps.clock(), kind=kind))


def start(rt: Runtime, rec: RunRecord, send: Send, task: str) -> Step:
    """The context of a task that takes the run's next step from its load ``rec`` (a run
    before its first step: the state its request makes)."""
    state = rec.state or initial_state(rt, rec)
    return Step(rt, state, rec.step_no, send, StoreIO(rt, rec.run_id, rec.cancel), task, loaded=rec)


def initial_state(rt: Runtime, rec: RunRecord) -> RunState:
    """The state of a run before its first step, from its request (a fork: its seed, the
    parent's history prepared when the fork was made)."""
    if rec.seed is not None:
        state = rec.seed.model_copy(update={"run_id": rec.run_id, "tenant": rec.tenant})
    else:
        request = RunRequest.model_validate(rec.request)
        state = new_state(request, rt.deps_for(None, request.model), run_id=rec.run_id)
    state.tenant = rec.tenant
    if rec.replay is not None:  # another run's recorded calls may answer this run's calls
        policy = ReplayPolicy.model_validate(rec.replay)
        flags = {t.name: t.idempotent for t in rt.tools}
        state.recorded = load_recorded(rt.store, policy, flags).model_dump(mode="json")
    if rec.batch_cost_budget_usd is not None:
        state.batch_id, state.batch_cost_budget_usd = rec.batch_id, rec.batch_cost_budget_usd
    return state


def commit(step: Step, adv: Advance, *, chain: bool = False, early: list[Event] | None = None) -> bool:
    """Save the step, then carry out what comes next. True when this task goes on with it
    itself (``chain``: selection and LLM turns); False otherwise, or when the step was stale.
    A step after which this task only sends the next task (tools, the synthesis) or nothing
    (a run that ends with no end-of-run listener to tell, nor a wait) hands its lease over in the
    commit's round trip: the commit's due record covers the sends. When the broker is the
    run's Redis server, the commit pushes those tasks' messages itself (``carried``)."""
    state = step.state
    handoff = isinstance(adv.next, RunTools | Answer) or (
        isinstance(adv.next, Done) and state.rate_limited_since is None and not listeners.wanted(state))
    pushes = carried(step, adv.next, chain=chain)
    if not save(step, adv, handoff=handoff, early=early, pushes=pushes):
        return False
    return pushes is None and enqueue(step, adv.next, chain=chain)


def carried(step: Step, nxt: Next, *, chain: bool) -> list[tuple[str, str]] | None:
    """The broker messages of the tasks ``nxt`` needs, built (by Celery and kombu, as a send
    builds them) for the commit to push in its own script: sent if and only if the commit wins,
    with no window between the two. None: sent after the commit (``enqueue``), because the
    broker is elsewhere (RabbitMQ, another Redis, a cluster), the task goes on itself
    (``chain``), or the run ends (its listeners are told after the commit)."""
    if not step.rt.sends_in_commit or isinstance(nxt, Done) or (chain and isinstance(nxt, SelectTools | CallLLM)):
        return None
    step.state.step_no = step.step_no + 1  # the step the messages name: the commit's (RunStore.commit)
    with transport.captured() as pushes:
        enqueue(step, nxt, chain=False)
    return pushes


def save(step: Step, adv: Advance, *, handoff: bool = False, early: list[Event] | None = None,
         pushes: list[tuple[str, str]] | None = None) -> bool:
    """Commit the step (compare-and-set on ``step_no``) with its metrics, the lease's release
    (``handoff``), the step's deferred writes, ``early``, live events of the next step
    (published, not part of the saved state), and ``pushes`` (``carried``) in one round trip;
    False when it was stale."""
    rt, state = step.rt, step.state
    turn_began = step.loaded.turn_began if step.loaded is not None else None
    ops = metrics.commit_ops(rt.recorder, state, step.step_no, adv)
    observed = metrics.turn_observations(rt.recorder, state, adv, step.began, turn_began)
    release = rt.leases.handoff() if handoff else None
    then = ([release] if release is not None else []) + take()
    if state.webhook_on_done and isinstance(adv.next, Done):  # in the commit's round trip
        then.append(webhooks.store(rt).arm_op(webhook_id("run", state.run_id)))
    if not rt.store.commit(state.run_id, state, step.step_no, adv.events + (early or []), ops=ops, then=then,
                           turn_began=step.began if isinstance(adv.next, RunTools) else None, pushes=pushes):
        log.info("run %s step %s was already committed elsewhere", state.run_id, step.step_no)
        return False
    if observed:
        rt.recorder.sums.add(observed)
    faults.point("after_commit")
    return True


def enqueue(step: Step, nxt: Next, *, chain: bool) -> bool:
    """Send what the committed next step needs (a finished run: its end-of-run listeners).
    True when, with ``chain``, this task takes the step itself instead."""
    run_id, step_no, send = step.run_id, step.state.step_no, step.send
    match nxt:
        case SelectTools() | CallLLM():
            if chain:
                return True
            send(ITERATE, [run_id, step_no], RUNS)
        case RunTools(calls=calls):
            for call in calls:
                # The tool name rides along for Flower; the task reads the call from Redis.
                send(TOOL, [run_id, step_no, call.id, call.name], TOOLS)
        case Answer():
            send(ANSWER, [run_id, step_no], RUNS)
        case Done():
            listeners.run_ended(step.rt, step.state, send)
        case _:
            assert_never(nxt)
    return False


def defer(step: Step, wait: RateLimited, published_seq: int) -> None:
    """The step waits for model capacity: commit the wait (one ``rate_limited`` event per
    wait), free this worker slot, and send the step again when capacity is expected."""
    state = step.state
    events = flow.deferred_events(state, wait, published_seq, now=time.time())
    if save(step, step.advanced(events)):
        flow.send_later(step.rt, step.task, [state.run_id, state.step_no], RUNS, wait.wait_s, state)


def defer_stored(step: Step, wait: RateLimited) -> None:
    """A step stopped by ``RateLimited`` half-way: defer it from the last committed state
    (events it already published keep their seqs; the wait's event comes after them)."""
    rec = step.rt.store.load(step.run_id)
    stored = replace(step, state=rec.state or initial_state(step.rt, rec), step_no=rec.step_no)
    defer(stored, wait, rec.pub_seq)
