"""Submitting a run on a thread (``RunRequest.thread_id``): the multitask strategies.

``Dispatcher.submit`` hands every request with a ``thread_id`` to ``submit_on_thread``.
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

import uuid
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.errors import RequestError, RunNotFound
from reactq.shared.keys import Keys
from reactq.shared.requests import RunRequest
from reactq.shared.settings import Settings
from reactq.shared.stores.runs import RunStore
from reactq.shared.stores.streams import text
from reactq.shared.tenancy import DEFAULT_TENANT, thread_key
from reactq.shared.stores.threads import (
    ORPHAN_AFTER,
    ThreadStore,
    arm_first_step,
    end_of_run,
    not_started,
    skip_orphans,
)
from reactq.shared.wire import ITERATE


class ThreadDoor(Protocol):
    """What a thread's submission and reads use of the dispatcher (``Dispatcher`` fits)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def keys(self) -> Keys: ...
    @property
    def redis(self) -> redis.Redis: ...
    @property
    def store(self) -> RunStore: ...
    def send(self, task: str, args: list[Any], queue: str = ...) -> None: ...
    def admit(self, tenant: str, run_id: str) -> None: ...


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
    ts: ThreadStore | None = d.__dict__.get("_thread_store")
    if ts is None:
        ts = d.__dict__["_thread_store"] = ThreadStore(d.redis, keys=d.keys,
                                                       ttl_seconds=d.settings.run_ttl_seconds)
    return ts


def submit_on_thread(d: ThreadDoor, req: RunRequest, run_id: str | None = None, *,
                     tenant: str = DEFAULT_TENANT) -> Submitted:
    """Start, enqueue, inject, reject or stop-and-replace, as ``req.multitask_strategy`` says.
    The thread is ``tenant``'s thread of that id (``tenancy.thread_key``)."""
    assert req.thread_id is not None
    tid = thread_key(tenant, req.thread_id)
    if req.idempotency_key is not None:
        existing = d.redis.get(d.keys.idem(req.idempotency_key, tenant))
        if existing:
            return Submitted(text(existing), created=False)
    ts = thread_store(d)
    repair(d, ts, tid)
    rid = run_id or uuid.uuid4().hex
    d.admit(tenant, rid)
    decision = ts.submit(tid, rid, req.multitask_strategy, req.query)
    active = decision.active_run
    if decision.kind == "reject":
        raise ThreadBusy(req.thread_id, active or "?")
    if decision.kind == "inject":
        assert active is not None
        if req.idempotency_key is not None and not d.redis.set(
                d.keys.idem(req.idempotency_key, tenant), active, nx=True, ex=d.store._index_ttl):
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
    arm_first_step(d.redis, d.keys, run_id, max(5.0, 3 * d.settings.lease_seconds))
    d.send(ITERATE, [run_id, 0])


def _ask_to_stop(d: ThreadDoor, run_id: str) -> None:
    """The active run stops at its next step boundary (as a cancel; the thread says why)."""
    try:
        rec = d.store.load(run_id)
    except RunNotFound:
        return
    if rec.status in TERMINAL_STATUSES:
        return
    d.store.request_cancel(run_id)
    # Nudge: a run waiting on slow tools stops now instead of when they report.
    d.send(ITERATE, [run_id, rec.step_no])


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


__all__ = ["ORPHAN_AFTER", "ThreadBusy", "repair", "submit_on_thread", "thread_store", "thread_view"]
