"""Submitting a run on a thread (``RunRequest.thread_id``): the multitask strategies.

The door (``Door.create_run``) hands every request with a ``thread_id`` to ``submit_on_thread``,
after the request passed the admission steps before the quota; the quota and the dollar-cap
rule (``admit``) are taken here, once the thread's idempotency key was looked up.
The decision itself is one Lua script (``ThreadStore.submit``); what follows it here is
storing the run and sending its first task (or asking the active run to stop, or
injecting the query into it).

Order of writes, and what a submitter that dies half-way leaves behind: the decision is
made first, then the run is stored. Dying in between leaves the thread holding a run that
was never stored; the hand-off past it (and the next submission or read of the thread)
skips it once the decision is older than ``ORPHAN_AFTER`` seconds. Dying after an
``interrupt`` decision but before the stop request reaches the active run makes it an
``enqueue``: the new run starts when the active one ends.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, Protocol

from reactq.shared.engine.conversation import thread_turns
from reactq.shared.engine.state import TERMINAL_STATUSES, RunState
from reactq.shared.errors import RequestError, RunNotFound
from reactq.shared.keys import Keys
from reactq.shared.requests import RunRequest
from reactq.shared.settings import Settings
from reactq.shared.stores.runs import RunStore
from reactq.shared.stores.bundle import Stores
from reactq.shared.stores.idempotency import idempotent_id
from reactq.shared.stores.streams import text
from reactq.shared.tenants.tenancy import DEFAULT_TENANT, thread_key
from reactq.shared.stores.threads import (
    ORPHAN_AFTER,
    ThreadStore,
    arm_first_step,
    not_started,
    skip_orphans,
)
from reactq.shared.service.ops import cancel_run, send_first_step


class ThreadDoor(Protocol):
    """What a thread's submission and reads use of the door (``Door`` fits)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def keys(self) -> Keys: ...
    @property
    def stores(self) -> Stores: ...
    @property
    def store(self) -> RunStore: ...
    def send(self, task: str, args: list[Any], queue: str = ...) -> None: ...


@dataclass(frozen=True)
class Submitted:
    """What became of a run submitted on a thread (the caller wraps it in a ``RunHandle``)."""

    run_id: str
    created: bool
    injected: bool = False
    """The query went into the thread's active run (``inject``): ``run_id`` is that run."""
    interrupt_id: str | None = None

class ThreadBusy(RequestError):
    """``multitask_strategy: reject`` while another run of the thread is active (HTTP 409)."""

    def __init__(self, thread_id: str, active_run: str) -> None:
        super().__init__(f"thread {thread_id} is busy with run {active_run} "
                         "(multitask_strategy=reject)", field="thread_id")
        self.thread_id = thread_id
        self.active_run = active_run

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.thread_id, self.active_run))


def thread_store(d: ThreadDoor) -> ThreadStore:
    return d.stores.threads


def submit_on_thread(d: ThreadDoor, req: RunRequest, run_id: str | None = None, *,
                     tenant: str = DEFAULT_TENANT, admit: Callable[[str], None]) -> Submitted:
    """Start, enqueue, inject, reject or stop-and-replace, as ``req.multitask_strategy`` says.
    The thread is ``tenant``'s thread of that id (``tenancy.thread_key``); ``admit(run_id)``
    takes the run's place among its tenant's active runs (and checks the dollar-cap rule)."""
    assert req.thread_id is not None
    tid = thread_key(tenant, req.thread_id)
    ts = thread_store(d)
    if req.idempotency_key is not None:
        existing = ts.keyed_run(req.idempotency_key, tenant)
        if existing:
            return Submitted(existing, created=False)
    repair(d, ts, tid)
    rid = run_id or uuid.uuid4().hex
    admit(rid)
    decision = ts.submit(tid, rid, req.multitask_strategy, req.query)
    active = decision.active_run
    if decision.kind == "reject":
        raise ThreadBusy(req.thread_id, active or "?")
    if decision.kind == "inject":
        assert active is not None
        if req.idempotency_key is not None and not ts.claim_key(req.idempotency_key, tenant, active,
                                                                 d.store._index_ttl):
            return Submitted(active, created=False)  # a retry of an injection that already happened
        return Submitted(active, created=False, injected=True,
                         interrupt_id=d.store.add_interrupt(active, req.query))
    stored, created = d.store.create(rid, req.model_dump(mode="json"), idempotency_key=req.idempotency_key,
                                     tenant=tenant)
    if decision.kind == "start":
        _start(d, rid)
    elif decision.kind == "stopping" and active is not None:
        _ask_to_stop(d, active)
    if decision.kind != "start" and ts.active(tid) == rid:
        # The active run ended between the decision and ``create``: its worker sent this
        # run's first task before the run existed, and that task found nothing. Again.
        _start(d, rid)
    return Submitted(stored, created=created)


def _start(d: ThreadDoor, run_id: str) -> None:
    """Send a thread run's first step, with a watchdog armed in case it is never started."""
    arm_first_step(d.stores.redis, d.keys, run_id, max(5.0, 3 * d.settings.lease_seconds))
    send_first_step(d.send, run_id)


def _ask_to_stop(d: ThreadDoor, run_id: str) -> None:
    """The active run stops at its next step boundary (as a cancel; the thread says why)."""
    cancel_run(d.store, d.send, run_id)


def repair(d: ThreadDoor, ts: ThreadStore, tid: str) -> None:
    """Hand the thread on if its active run has ended but was never released (its worker
    died in between and no task was left to redo it), or was never stored at all."""
    active = ts.active(tid)
    if active is None:
        return
    [[status]] = d.store.fields_of([active], "status")
    if status is None:
        nxt = skip_orphans(ts, d.store, tid, active)
        if nxt is not None and nxt != active and not_started(d.store, nxt):
            _start(d, nxt)
        return
    if text(status) not in TERMINAL_STATUSES:
        return  # the usual case: one field read
    try:
        rec = d.store.load(active)
    except RunNotFound:
        return
    if rec.state is not None and rec.state.phase == "done":
        nxt = end_of_run(ts, d.store, tid, rec.state.model_copy(update={"thread_id": tid}))
        if nxt is not None and nxt != active and not_started(d.store, nxt):
            _start(d, nxt)


def end_of_run(threads: ThreadStore, runs: RunStore, thread_id: str, state: RunState) -> str | None:
    """Release the thread of a run whose state is terminal; returns the run to start next.

    Messages injected into the run that it never read (they came while it was already
    writing its answer) become runs of their own, first in the queue: an ``inject`` is
    never lost. Not for a stopped run: the message that stopped it supersedes them.

    Safe to call again (after a crash, from a redelivered task or the gateway): a run that
    is no longer active adds nothing and the current active run is returned; follow-up
    runs are stored under an idempotency key, so a redo makes none twice.
    """
    if state.status not in TERMINAL_STATUSES or state.phase != "done":
        raise ValueError(f"run {state.run_id} has not ended")
    stop = threads.stop_kind(thread_id, state.run_id)
    followups: list[tuple[str, str]] = []
    if state.status != "cancelled" and threads.active(thread_id) == state.run_id:
        followups = _followup_runs(runs, state)
    nxt = threads.release(thread_id, state.run_id, thread_turns(state, stop), followups)
    return skip_orphans(threads, runs, thread_id, nxt)


def _followup_runs(runs: RunStore, state: RunState) -> list[tuple[str, str]]:
    leftovers = runs.interrupts_after(state.run_id, state.interrupt_cursor)
    if not leftovers:
        return []
    [[raw]] = runs.fields_of([state.run_id], "request")
    request = json.loads(raw) if raw else {"query": state.query, "thread_id": state.thread_id}
    out = []
    for msg in leftovers:
        req = {**request, "query": msg.content, "multitask_strategy": "enqueue",
               "idempotency_key": f"followup:{state.run_id}:{msg.id}"}
        key = req["idempotency_key"]
        rid, _ = runs.create(idempotent_id(key, tenant=state.tenant), req, idempotency_key=key,
                             tenant=state.tenant)
        out.append((rid, msg.content))
    return out


def thread_view(d: ThreadDoor, thread_id: str, tenant: str = DEFAULT_TENANT) -> dict[str, Any] | None:
    """``{thread_id, active_run, runs: [{run_id, status, query, created_at}], messages}`` of
    ``tenant``'s thread; None when there is no such thread (never used, or expired)."""
    tid = thread_key(tenant, thread_id)
    ts = thread_store(d)
    if not ts.touch(tid):
        return None
    repair(d, ts, tid)
    entries = ts.runs(tid)
    statuses = [row[0] for row in d.store.fields_of([e["run_id"] for e in entries], "status")]
    runs = [{"run_id": e["run_id"], "status": s or "expired", "query": e["query"],
             "created_at": e["created_at"]} for e, s in zip(entries, statuses, strict=True)]
    messages = [m.model_dump(mode="json", include={"role", "content"}) for m in ts.history(tid)]
    return {"thread_id": thread_id, "active_run": ts.active(tid), "runs": runs, "messages": messages}


__all__ = ["ORPHAN_AFTER", "Submitted", "end_of_run", "ThreadBusy", "ThreadDoor", "repair",
           "submit_on_thread", "thread_store", "thread_view"]
