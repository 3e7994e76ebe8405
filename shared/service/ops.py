"""The door's two sends, each in one place: a run's first step, and a cancel.

Every entry that starts a stored run (the door itself, a thread handing on to its next run, a
batch or DAG re-attaching a run after a crash) calls ``send_first_step``; every entry that
stops one (cancel over HTTP or the CLI, a thread's ``interrupt`` strategy, a schedule's
``cancel_previous``, a DAG cancelling a step) calls ``cancel_run``.
"""

from __future__ import annotations

from collections.abc import Callable

from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.errors import RunNotFound
from reactq.shared.stores.runs import RunStore
from reactq.shared.wire import ITERATE, RUNS_QUEUE

__all__ = ["cancel_run", "send_first_step"]


def send_first_step(send: Callable[..., None], run_id: str, *, priority: int | None = None) -> None:
    """Send a stored run's first step (a duplicate is harmless: a step already taken is a
    no-op for the workers). ``send`` is ``(task, args, queue)``, given ``priority=`` only
    when there is one."""
    if priority:
        send(ITERATE, [run_id, 0], RUNS_QUEUE, priority=priority)
    else:
        send(ITERATE, [run_id, 0], RUNS_QUEUE)


def cancel_run(store: RunStore, send: Callable[..., None], run_id: str) -> bool:
    """Ask the run to stop at its next step boundary (it ends ``cancelled``), and nudge it so
    that a run waiting on slow tools ends now. False when it had ended or does not exist (a
    thread's or a DAG's stop may name a run not made yet; ``Door.cancel_run`` answers
    ``RunNotFound`` for an unknown id first)."""
    try:
        rec = store.load(run_id)
    except RunNotFound:
        return False
    if rec.status in TERMINAL_STATUSES:
        return False
    store.request_cancel(run_id)
    send(ITERATE, [run_id, rec.step_no], RUNS_QUEUE)
    return True
