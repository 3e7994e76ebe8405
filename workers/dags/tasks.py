"""DAG tasks: the Celery shell around ``reactq.shared.dag.machine``. Payloads carry ids only.

| task                    | args                      | does                                           |
|-------------------------|---------------------------|------------------------------------------------|
| ``reactq.dag.start``    | dag_id                    | creates the state, then plans round 1          |
| ``reactq.dag.plan``     | dag_id, round             | planner call (or the user's plan) → launch      |
| ``reactq.dag.step_done``| dag_id, step_id, run_id   | a child run ended: record it, launch what is ready |
| ``reactq.dag.advance``  | dag_id, tick (None=nudge) | timeouts, progress, lost notifications, cancel, follow-ups |
| ``reactq.dag.analyze``  | dag_id, round             | analyzer call → re-plan or synthesize           |
| ``reactq.dag.answer``   | dag_id                    | streamed synthesis (or the completed results), ``done`` |
| ``reactq.dag.resume``   | dag_id                    | the watchdog's way back in after a worker died  |

Every task holds the DAG's lease (``dag:{id}``) while it works, and saves with
compare-and-set on the state's version, so two tasks never advance the same DAG at once and
a redelivered task is a no-op or redoes only what was not saved. A task that finds the lease
busy comes back a moment later instead of being dropped. The lease's resend spec is
``reactq.dag.resume``: if a worker dies mid-task, another worker resumes whatever the DAG's
phase needs. Effects (child runs, next tasks) happen only after the save that decided them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, cast

import redis

from reactq.shared.dag import machine as M
from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.stores.due import dag_member
from reactq.shared.wire import (
    DAG_ADVANCE,
    DAG_ANALYZE,
    DAG_ANSWER,
    DAG_PLAN,
    DAG_RESUME,
    DAG_START,
    DAG_STEP_DONE,
    RUNS_QUEUE,
)
from reactq.workers import faults
from reactq.workers.app import app
from reactq.workers.dags.context import DagContext, context, send
from reactq.workers.dags.drive import (
    drive_analyze,
    drive_answer,
    drive_plan,
    drive_reconcile,
    drive_resume,
    drive_start,
    load_live,
)

log = logging.getLogger(__name__)


def _locked(task: str, dag_id: str, args: list[Any], fn: Callable[[DagContext], None]) -> None:
    """Run ``fn`` holding the DAG's lease; busy ⇒ come back shortly (never drop a signal).

    Taking over a lease whose holder died also takes over its duty: releasing the lease
    erases the watchdog's record of the dead holder, so the resume the watchdog would have
    sent is done here first (resuming is idempotent; ``fn`` is then usually a no-op). The
    lease is only tried right after looking at that record, so no takeover goes unnoticed.
    """
    ctx = context()
    leases = ctx.rt.leases
    member = dag_member(dag_id)
    # Two TTLs: a dead holder's key lingers for up to one.
    deadline = time.monotonic() + 2 * leases.ttl_ms / 1000
    faults.point("before_lease", task)
    while True:
        orphaned = _orphaned(ctx, member)
        with leases.hold_only(member, DAG_RESUME, [dag_id], RUNS_QUEUE, wait=0) as held:
            if held:
                try:
                    if orphaned and task != DAG_RESUME:
                        log.warning("dag %s: taking over from a worker that stopped", dag_id)
                        drive_resume(ctx, dag_id)
                    fn(ctx)
                except redis.RedisError:
                    # Nothing can be saved now: try again in a moment (if the broker is
                    # reachable; else the watchdog's record of this lease brings it back).
                    log.exception("dag %s: %s hit a Redis error", dag_id, task)
                    _send_quietly(task, args, leases.ttl_ms / 1000)
                    raise
                except Exception as exc:  # noqa: BLE001 — every DAG must end in a terminal state
                    log.exception("dag %s: %s failed", dag_id, task)
                    _fail(ctx, dag_id, exc)
                return
        if time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    status = cast(bytes | None, ctx.store.r.hget(ctx.store.keys.dag(dag_id), "status"))
    if status is not None and status.decode() not in TERMINAL_STATUSES:
        send(task, args, countdown=leases.ttl_ms / 1000)


def _send_quietly(task: str, args: list[Any], countdown: float) -> None:
    try:
        send(task, args, countdown=countdown)
    except Exception:  # noqa: BLE001 — best effort while the broker may be down too
        log.warning("could not re-send %s%s", task, args)


def _fail(ctx: DagContext, dag_id: str, exc: Exception) -> None:
    """A bug or an unexpected error: end the DAG ``failed`` rather than leave it hanging."""
    live = load_live(ctx, dag_id)
    if live is not None:
        rec, state = live
        ctx.save(state, rec.version, M.fail(state, f"Pipeline error: {type(exc).__name__}: {exc}",
                                            ctx.env()))


def give_up(ctx: DagContext, dag_id: str, crashes: int) -> None:
    """The DAG's driving task stopped ``REACTQ_MAX_TASK_CRASHES`` times: end it ``failed``."""
    with ctx.rt.leases.hold_only(dag_member(dag_id), DAG_RESUME, [dag_id], RUNS_QUEUE, wait=0) as held:
        live = load_live(ctx, dag_id) if held else None
        if live is not None:
            rec, state = live
            state.seq = max(state.seq, rec.pub_seq)  # after what the crashed task published
            text = (f"The DAG's next task was not run again: the worker running it stopped "
                    f"{crashes} times (REACTQ_MAX_TASK_CRASHES={ctx.rt.settings.max_task_crashes}).")
            ctx.save(state, rec.version, M.fail(state, text, ctx.env(), kind="task_crashed"))


def _orphaned(ctx: DagContext, member: str) -> bool:
    """The lease's last holder died: its resend spec is still recorded although its key is
    gone (a normal release removes both at once, in one script)."""
    leases = ctx.rt.leases
    # Both keys are in the member's lease shard (one slot), so a cluster pipeline is fine.
    pipe = leases.r.pipeline(transaction=False)
    pipe.hexists(leases.keys.lease_tasks_for(member), member)
    pipe.exists(leases.keys.lease(member))
    spec, alive = pipe.execute()
    return bool(spec) and not alive


# -- tasks ----------------------------------------------------------------------------------

@app.task(name=DAG_START, ignore_result=True)
def start(dag_id: str) -> None:
    _locked(DAG_START, dag_id, [dag_id], lambda ctx: drive_start(ctx, dag_id))


@app.task(name=DAG_PLAN, ignore_result=True)
def plan(dag_id: str, round_no: int) -> None:
    _locked(DAG_PLAN, dag_id, [dag_id, round_no], lambda ctx: drive_plan(ctx, dag_id, round_no))


@app.task(name=DAG_STEP_DONE, ignore_result=True)
def step_done(dag_id: str, step_id: str, run_id: str) -> None:
    _locked(DAG_STEP_DONE, dag_id, [dag_id, step_id, run_id],
            lambda ctx: drive_reconcile(ctx, dag_id))


@app.task(name=DAG_ADVANCE, ignore_result=True)
def advance(dag_id: str, tick: int | None = None) -> None:
    _locked(DAG_ADVANCE, dag_id, [dag_id, tick],
            lambda ctx: drive_reconcile(ctx, dag_id, tick=tick))


@app.task(name=DAG_ANALYZE, ignore_result=True)
def analyze_task(dag_id: str, round_no: int) -> None:
    _locked(DAG_ANALYZE, dag_id, [dag_id, round_no],
            lambda ctx: drive_analyze(ctx, dag_id, round_no))


@app.task(name=DAG_ANSWER, ignore_result=True)
def answer(dag_id: str) -> None:
    _locked(DAG_ANSWER, dag_id, [dag_id], lambda ctx: drive_answer(ctx, dag_id))


@app.task(name=DAG_RESUME, ignore_result=True)
def resume(dag_id: str) -> None:
    _locked(DAG_RESUME, dag_id, [dag_id], lambda ctx: drive_resume(ctx, dag_id))


__all__ = ["advance", "analyze_task", "answer", "give_up", "plan", "resume", "start", "step_done"]
