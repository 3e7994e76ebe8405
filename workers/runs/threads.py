"""The worker's side of threads: a run starts from its thread's history, stops when a newer
run of its thread interrupts it, and hands the thread on when it ends.

``drive`` calls three functions here; runs without a thread pay nothing but a dict lookup.
"""

from __future__ import annotations

import logging
from typing import Any

from reactq.shared.engine import ending
from reactq.shared.engine.conversation import fit_history
from reactq.shared.engine.state import RunState
from reactq.shared.events import Event
from reactq.shared.stores.run_hash import RunRecord
from reactq.shared.service.ops import send_first_step
from reactq.shared.service.threads import end_of_run
from reactq.shared.stores.threads import ThreadStore, arm_first_step, not_started, run_thread
from reactq.shared.tenants.tenancy import thread_key
from reactq.workers.runtime import Runtime

log = logging.getLogger(__name__)



def thread_store(rt: Runtime) -> ThreadStore:
    return rt.stores.threads


def prepare(rt: Runtime, rec: RunRecord, state: RunState) -> bool:
    """Before a thread run's first step: give it the thread's history. False when the run is
    not (yet) the thread's active run — it waits in the queue; its thread will send it."""
    tid = run_thread(rec.request)
    if tid is None:
        return True
    tid = thread_key(rec.tenant, tid)  # the tenant's own thread of that name
    ts = thread_store(rt)
    state.thread_id = tid
    if ts.active(tid) != rec.run_id and not rec.cancel:
        log.info("run %s waits for its turn on thread %s", rec.run_id, tid)
        return False
    state.history = fit_history(ts.history(tid), rt.config.context_budget // 2)
    return True


def stop(rt: Runtime, state: RunState, now: float) -> list[Event]:
    """A cancel request: ``interrupt`` / ``rollback`` when a newer run of the thread asked
    for it (open tool calls are answered as interrupted), else the plain cancel."""
    if state.thread_id:
        kind = thread_store(rt).stop_kind(state.thread_id, state.run_id)
        if kind in ("interrupt", "rollback"):
            return ending.interrupt(state, now=now, strategy=kind)
    return ending.cancel(state, now=now)


def ended(rt: Runtime, state: RunState, send: Any) -> None:
    """A run of a thread ended (any status): record it in the thread, start the next run.

    Also called for a run found already ended (a redelivered task after a crash between the
    final commit and this call): the release is idempotent, and the run it names is sent
    again, which is harmless (a stale or leased step is a no-op).
    """
    if not state.thread_id:
        return
    nxt = end_of_run(thread_store(rt), rt.store, state.thread_id, state)
    if nxt is not None and nxt != state.run_id and not_started(rt.store, nxt):
        arm_first_step(rt.redis, rt.keys, nxt, handoff_grace(rt.settings.lease_seconds))
        send_first_step(send, nxt)


def handoff_grace(lease_seconds: float) -> float:
    """How long a handed-on run may wait for a worker before a watchdog sends it again."""
    return max(5.0, 3 * lease_seconds)
