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
from functools import cached_property
from typing import Any

import redis

from reactq.shared.dag import machine as M
from reactq.shared.dag import prompts as P
from reactq.shared.dag.analyzer import analyze
from reactq.shared.dag.binding import name_for_role
from reactq.shared.dag.config import DagConfig
from reactq.shared.dag.models import ExecutionPlan, PlanStep, validate_steps
from reactq.shared.dag.planner import create_plan
from reactq.shared.dag.query import fallback_answer, replan_context, synthesis_messages
from reactq.shared.dag.state import DagState
from reactq.shared.dag.store import DagNotFound, DagRecord, DagStore
from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.engine.synthesis import fallback_chunks
from reactq.shared.errors import RunNotFound, StructuredOutputError
from reactq.shared.models import Usage
from reactq.shared.requests import DagRequest
from reactq.shared.wire import (
    DAG_ADVANCE,
    DAG_ANALYZE,
    DAG_ANSWER,
    DAG_PLAN,
    DAG_RESUME,
    DAG_START,
    DAG_STEP_DONE,
    ITERATE,
)
from reactq.shared.wire import RUNS_QUEUE as RUNS
from reactq.workers import faults
from reactq.workers.app import app
from reactq.workers.runtime import Runtime, runtime

log = logging.getLogger(__name__)

RESUME = DAG_RESUME


def send(task: str, args: list[Any], countdown: float | None = None) -> None:
    app.send_task(task, args=args, queue=RUNS, countdown=countdown, argsrepr=repr(args),
                  kwargsrepr="{}")


class DagContext:
    """A worker's DAG objects, built once per process on top of its ``Runtime``."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    @cached_property
    def store(self) -> DagStore:
        s = self.rt.settings
        return DagStore(self.rt.redis, keys=self.rt.keys, ttl_seconds=s.run_ttl_seconds,
                        maxlen=s.events_maxlen, due_seconds=s.due_seconds)

    @cached_property
    def config(self) -> DagConfig:
        return DagConfig()

    def env(self) -> M.Env:
        models = self.rt.models
        return M.Env(config=self.config, now=time.time(),
                     model_for=lambda hint: name_for_role(models, hint))

    def save(self, state: DagState, version: int, t: M.Transition) -> bool:
        """Save, then carry out the effects (only a winning save has any)."""
        if not self.store.commit(state, version, t.events):
            log.info("dag %s: version %s was saved elsewhere", state.dag_id, version)
            return False
        for effect in t.effects:
            self._apply(effect, state.dag_id)
        return True

    def _apply(self, effect: M.Effect, dag_id: str) -> None:
        runs = self.rt.store
        if isinstance(effect, M.StartRun):
            if not runs.r.exists(runs.keys.run(effect.run_id)):
                runs.create(effect.run_id, effect.request)
            if self.store.cancel_requested(dag_id):
                # A cancel that looked for this run before it existed found nothing to stop.
                runs.request_cancel(effect.run_id)
            send(ITERATE, [effect.run_id, 0])
        elif isinstance(effect, M.CancelRun):
            try:
                rec = runs.load(effect.run_id)
            except RunNotFound:
                return
            if rec.status not in TERMINAL_STATUSES:
                runs.request_cancel(effect.run_id)
                send(ITERATE, [effect.run_id, rec.step_no])
        else:
            send(effect.task, effect.args, effect.countdown)

    def run_status(self, run_id: str) -> dict[str, Any] | None:
        try:
            return self.rt.store.status(run_id)
        except RunNotFound:
            return None


_ctx: DagContext | None = None


def context() -> DagContext:
    global _ctx
    if _ctx is None:
        _ctx = DagContext(runtime())
    return _ctx


def _locked(task: str, dag_id: str, args: list[Any], fn: Callable[[DagContext], None]) -> None:
    """Run ``fn`` holding the DAG's lease; busy ⇒ come back shortly (never drop a signal).

    Taking over a lease whose holder died also takes over its duty: releasing the lease
    erases the watchdog's record of the dead holder, so the resume the watchdog would have
    sent is done here first (resuming is idempotent; ``fn`` is then usually a no-op). The
    lease is only tried right after looking at that record, so no takeover goes unnoticed.
    """
    ctx = context()
    leases = ctx.rt.leases
    member = f"dag:{dag_id}"
    # Two TTLs: a dead holder's key lingers for up to one.
    deadline = time.monotonic() + 2 * leases.ttl_ms / 1000
    faults.point("before_lease", task)
    while True:
        orphaned = _orphaned(ctx, member)
        with leases.hold(member, RESUME, [dag_id], RUNS, wait=0) as held:
            if held:
                try:
                    if orphaned and task != RESUME:
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
    status = ctx.store.r.hget(ctx.store.keys.dag(dag_id), "status")
    if status is not None and status.decode() not in ("succeeded", "failed", "cancelled"):
        send(task, args, countdown=leases.ttl_ms / 1000)


def _send_quietly(task: str, args: list[Any], countdown: float) -> None:
    try:
        send(task, args, countdown=countdown)
    except Exception:  # noqa: BLE001 — best effort while the broker may be down too
        log.warning("could not re-send %s%s", task, args)


def _fail(ctx: DagContext, dag_id: str, exc: Exception) -> None:
    """A bug or an unexpected error: end the DAG ``failed`` rather than leave it hanging."""
    live = _live(ctx, dag_id)
    if live is not None:
        rec, state = live
        ctx.save(state, rec.version, M.fail(state, f"Pipeline error: {type(exc).__name__}: {exc}",
                                            ctx.env()))


def give_up(ctx: DagContext, dag_id: str, crashes: int) -> None:
    """The DAG's driving task stopped ``REACTQ_MAX_TASK_CRASHES`` times: end it ``failed``."""
    with ctx.rt.leases.hold(f"dag:{dag_id}", RESUME, [dag_id], RUNS, wait=0) as held:
        live = _live(ctx, dag_id) if held else None
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


@app.task(name=RESUME, ignore_result=True)
def resume(dag_id: str) -> None:
    _locked(RESUME, dag_id, [dag_id], lambda ctx: drive_resume(ctx, dag_id))


# -- what each task does ----------------------------------------------------------------------

def _live(ctx: DagContext, dag_id: str) -> tuple[DagRecord, DagState] | None:
    """The record and state if the DAG is still going, else None."""
    try:
        rec = ctx.store.load(dag_id)
    except DagNotFound:
        return None  # expired: a late message has nothing to do
    if rec.state is None or rec.state.phase == "done":
        return None
    return rec, rec.state


def drive_start(ctx: DagContext, dag_id: str) -> None:
    try:
        rec = ctx.store.load(dag_id)
    except DagNotFound:
        return
    if rec.state is None:
        request = DagRequest.model_validate(rec.request)
        model = request.model or name_for_role(ctx.rt.models, "smart")
        state = M.new_dag(dag_id, request, model=model, now=time.time())
        if not ctx.save(state, rec.version, M.start_planning(state)):
            return
    drive_plan(ctx, dag_id, 1)


def drive_plan(ctx: DagContext, dag_id: str, round_no: int) -> None:
    live = _live(ctx, dag_id)
    if live is None or live[1].phase != "planning" or live[1].round != round_no:
        return
    rec, state = live
    env = ctx.env()
    try:
        plan, usage = _make_plan(ctx, rec, state)
    except StructuredOutputError:
        t = M.fail(state, P.PLANNING_FAILED, env, kind="planning_failed")
    except Exception as exc:  # noqa: BLE001 — S93a: any other error ends the DAG, reported
        log.warning("dag %s: planning failed: %s", dag_id, exc)
        t = M.fail(state, f"Pipeline error: {type(exc).__name__}: {exc}", env)
    else:
        state.usage = state.usage + usage
        t = _interrupted(ctx, state, env)
        if t is None:
            followups = ctx.store.interrupts_after(dag_id, state.interrupt_cursor)
            if followups:
                # The plan was made without the follow-up: plan this round again with it.
                t = M.absorb_followups(state, followups, env)
                t.effects.append(M.Send(M.TASK_PLAN, [dag_id, round_no]))
            else:
                t = M.begin_round(state, plan, env)
    ctx.save(state, rec.version, t)


def _make_plan(ctx: DagContext, rec: DagRecord, state: DagState) -> tuple[ExecutionPlan, Usage]:
    request = DagRequest.model_validate(rec.request)
    if state.round == 1 and request.steps is not None:
        # The user's plan (already refused at the door if cyclic); dangling deps are pruned.
        steps, warnings = validate_steps([PlanStep(**s.model_dump()) for s in request.steps])
        return ExecutionPlan(goal=state.goal, steps=steps, warnings=warnings), Usage()
    tools = [(t.name, t.description) for t in ctx.rt.tools
             if state.tools is None or t.name in state.tools]
    context = replan_context(state.history, recent=ctx.config.recent_truncation,
                             older=ctx.config.older_truncation) if state.history else None
    outcome = ctx.rt.run(create_plan(
        ctx.rt.llm(state.model), state.effective_goal(), tools=tools, context=context,
        desc_length=ctx.config.planner_desc_length, max_steps=ctx.config.max_steps))
    return outcome.plan, outcome.usage


def _interrupted(ctx: DagContext, state: DagState, env: M.Env) -> M.Transition | None:
    """After a long call: the DAG was cancelled meanwhile ⇒ the cancel transition."""
    if ctx.store.cancel_requested(state.dag_id):
        return M.cancel(state, env)
    return None


def drive_reconcile(ctx: DagContext, dag_id: str, *, tick: int | None = None,
                    repair: bool = False) -> None:
    """Bring an executing DAG up to date with its child runs (and the user), then save."""
    for _ in range(5):
        live = _live(ctx, dag_id)
        if live is None:
            return
        rec, state = live
        env = ctx.env()
        if rec.cancel:
            ctx.save(state, rec.version, M.cancel(state, env))
            return
        if state.phase != "executing" or (tick is not None and tick != state.tick):
            return  # the phase's own task is on it, or a stale tick
        if tick is not None or repair:
            # This tick is spent (or, after a crash, may be lost with its worker):
            # schedule() arms a new one, and the old one, if alive, is stale.
            state.tick_due = 0.0
        t = _observe(ctx, state, env, repair=repair)
        if not t.events and not t.effects:
            return
        if ctx.save(state, rec.version, t):
            return


def _observe(ctx: DagContext, state: DagState, env: M.Env, *, repair: bool) -> M.Transition:
    t = M.absorb_followups(state, ctx.store.interrupts_after(state.dag_id, state.interrupt_cursor), env)
    for step in [s for s in state.steps if s.status == "running" and s.run_id]:
        assert step.run_id is not None
        t.events += M.forward_progress(state, step, ctx.rt.store.read_events(step.run_id, step.cursor), env)
        run = ctx.run_status(step.run_id)
        if run is None:
            # Its creator died between saving the launch and creating the run.
            t.effects.append(M.child_request(state, step, env))
        elif run["status"] in TERMINAL_STATUSES and run["result"] is not None:
            t += M.complete_step(state, step.id, step.run_id, run, env)
        elif repair and run["status"] == "queued" and run["events"] == 0 \
                and not ctx.rt.leases.alive(f"run:{step.run_id}"):
            # Created, but its first task may never have been sent: a duplicate is harmless.
            t.effects.append(M.Send(ITERATE, [step.run_id, 0]))
    t += M.schedule(state, env)
    return t


def drive_analyze(ctx: DagContext, dag_id: str, round_no: int) -> None:
    live = _live(ctx, dag_id)
    if live is None or live[1].phase != "analyzing" or live[1].round != round_no:
        return
    rec, state = live
    outcome = ctx.rt.run(analyze(ctx.rt.llm(state.model), state.effective_goal(), state.steps,
                                 truncation=ctx.config.analyzer_truncation))
    env = ctx.env()
    t = _interrupted(ctx, state, env)
    if t is None:
        t = M.absorb_followups(state, ctx.store.interrupts_after(dag_id, state.interrupt_cursor), env)
        t += M.apply_analysis(state, outcome.analysis, outcome.usage, env)
    ctx.save(state, rec.version, t)


def drive_answer(ctx: DagContext, dag_id: str) -> None:
    live = _live(ctx, dag_id)
    if live is None or live[1].phase != "synthesizing":
        return
    rec, state = live
    env = ctx.env()
    t = _interrupted(ctx, state, env)
    if t is None:
        text, events = _answer_text(ctx, rec, state)
        env = ctx.env()  # the synthesis took time: elapsed is measured after it
        events.append(M.emit(state, "answer", status="done"))
        events.append(M.emit(state, "phase", name="synthesizing", status="done", round=state.round))
        leftovers = [c for _, c in ctx.store.interrupts_after(dag_id, state.interrupt_cursor)]
        events += M.conclude(state, text, env, pending=leftovers or None)
        t = M.Transition(events)
    ctx.save(state, rec.version, t)


def _answer_text(ctx: DagContext, rec: DagRecord, state: DagState) -> tuple[str, list[Any]]:
    """S93: the answer and the events still to publish (deltas may already be out)."""
    analysis = state.analysis
    fallback = (analysis.final_answer if analysis else None) or fallback_answer(state.steps)
    if rec.pub_seq > state.seq:
        # An earlier attempt streamed part of the answer and died: what was sent stays
        # sent, and the fallback completes it (as for a run's synthesis).
        sent = "".join(e.data.get("content", "") for _, e in ctx.store.read_events(state.dag_id)
                       if e.channel == "answer" and e.seq > state.seq and e.data.get("status") == "delta")
        state.seq = rec.pub_seq
        return sent + fallback, _fallback_events(state, fallback, "the worker streaming the answer stopped")
    if not (analysis and analysis.achieved):
        text = fallback_answer(state.steps)
        return text, [M.emit(state, "answer", status="start"),
                      *(M.emit(state, "answer", status="delta", content=c) for c in fallback_chunks(text))]
    ctx.store.publish(state.dag_id, [M.emit(state, "answer", status="start")])
    parts: list[str] = []
    try:
        ctx.rt.run(_stream(ctx, state, parts))
    except Exception as exc:  # noqa: BLE001 — S93: a failed synthesis falls back
        log.warning("dag %s: synthesis failed: %s", state.dag_id, exc)
        return "".join(parts) + fallback, _fallback_events(state, fallback, exc)
    if not parts:
        return fallback, _fallback_events(state, fallback, "the synthesis returned no text")
    return "".join(parts), []


async def _stream(ctx: DagContext, state: DagState, parts: list[str]) -> None:
    messages = synthesis_messages(state.effective_goal(), state.steps, state.analysis,
                                  truncation=ctx.config.synthesis_truncation)
    async for chunk in ctx.rt.llm(state.model).stream_chat(messages):
        if chunk.delta_content:
            parts.append(chunk.delta_content)
            ctx.store.publish(state.dag_id, [M.emit(state, "answer", status="delta",
                                                    content=chunk.delta_content)])
        if chunk.usage:
            state.usage = state.usage + Usage.from_dict(chunk.usage)


def _fallback_events(state: DagState, text: str, why: BaseException | str) -> list[Any]:
    message = why if isinstance(why, str) else f"{type(why).__name__}: {why}"
    return [M.emit(state, "error", kind="synthesis_fallback",
                   message=f"Answer synthesis failed ({message}); using the results instead"),
            *(M.emit(state, "answer", status="delta", content=c) for c in fallback_chunks(text))]


def drive_resume(ctx: DagContext, dag_id: str) -> None:
    """A worker died holding this DAG: pick up whatever its phase needs."""
    try:
        state = ctx.store.load(dag_id).state
    except DagNotFound:
        return
    if state is None:
        drive_start(ctx, dag_id)
    elif state.phase == "planning":
        drive_plan(ctx, dag_id, state.round)
    elif state.phase == "executing":
        drive_reconcile(ctx, dag_id, repair=True)
    elif state.phase == "analyzing":
        drive_analyze(ctx, dag_id, state.round)
    elif state.phase == "synthesizing":
        drive_answer(ctx, dag_id)


__all__ = ["advance", "analyze_task", "answer", "plan", "resume", "start", "step_done"]
