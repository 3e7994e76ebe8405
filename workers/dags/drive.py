"""What each DAG task does, on a worker's ``DagContext``: load the DAG, ask the machine
(``reactq.shared.dag.machine``) for the transition, save it with compare-and-set on the
state's version, then carry out its effects (child runs, the next task). The tasks that call
these, and the lease around them, are in ``workers/dags/tasks.py``.
"""

from __future__ import annotations

import logging
import time
from contextlib import AbstractContextManager
from typing import Any

from reactq.shared.dag import machine as M
from reactq.shared.stores.due import run_member
from reactq.shared.dag import prompts as P
from reactq.shared.dag.analyzer import analyze
from reactq.shared.dag.binding import name_for_role
from reactq.shared.dag.models import ExecutionPlan, PlanStep, validate_steps
from reactq.shared.dag.planner import create_plan
from reactq.shared.dag.query import fallback_answer, replan_context, synthesis_messages
from reactq.shared.dag.state import DagState
from reactq.shared.stores.dags import DagNotFound, DagRecord
from reactq.shared.engine import guard
from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.engine.synthesis import fallback_chunks
from reactq.shared.errors import CostCapReached, StructuredOutputError
from reactq.shared.flow.middleware import FlowScope, flow_scope
from reactq.shared.hooks import HookPoint
from reactq.shared.models import Usage
from reactq.shared.requests import DagRequest
from reactq.shared.stores.flow import Limits
from reactq.shared.tenants import quota_of
from reactq.workers import metrics
from reactq.workers.dags.context import DagContext
from reactq.workers.dags.guarded import check, guarded
from reactq.workers.dags.typed import typed_answer

log = logging.getLogger(__name__)


def load_live(ctx: DagContext, dag_id: str) -> tuple[DagRecord, DagState] | None:
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
        state.tenant = rec.tenant
        blocked = _guardrails(ctx, state, request)
        if not ctx.save(state, rec.version, blocked or M.start_planning(state)) or blocked:
            return
    drive_plan(ctx, dag_id, 1)


def _guardrails(ctx: DagContext, state: DagState, request: DagRequest) -> M.Transition | None:
    """The ``RUN_START`` guardrails over the goal and each given step's task, before the
    planner's call: a block ends the DAG ``failed`` with ``error {kind: "guardrail"}``."""
    hooks = ctx.rt.hooks
    if not hooks.has(HookPoint.RUN_START):
        return None
    texts = [("goal", request.goal), *((f"steps.{i}.task", s.task) for i, s in enumerate(request.steps or []))]
    _, got = ctx.rt.run(guard.check_texts(hooks, texts, {**request.metadata, "dag_id": state.dag_id}))
    if got is None or got.blocked is None:
        return None
    return M.fail(state, got.blocked.message or "blocked", ctx.env(), kind="guardrail",
                  guardrail=got.blocked.guardrail)


def drive_plan(ctx: DagContext, dag_id: str, round_no: int) -> None:
    live = load_live(ctx, dag_id)
    if live is None or live[1].phase != "planning" or live[1].round != round_no:
        return
    rec, state = live
    env = ctx.env()
    t: M.Transition
    try:
        plan, usage = _make_plan(ctx, rec, state)
    except CostCapReached as cap:
        t = _refused(ctx, state, cap)
    except StructuredOutputError:
        t = M.fail(state, P.PLANNING_FAILED, env, kind="planning_failed")
    except Exception as exc:  # noqa: BLE001 — any other error ends the DAG, reported
        log.warning("dag %s: planning failed: %s", dag_id, exc)
        t = M.fail(state, f"Pipeline error: {type(exc).__name__}: {exc}", env)
    else:
        state.usage = state.usage + usage
        stopped = _interrupted(ctx, state, env)
        if stopped is not None:
            t = stopped
        else:
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
    tools = [(t.name, t.description) for t in ctx.rt.run_tools
             if state.tools is None or t.name in state.tools]
    context = replan_context(state.history, recent=ctx.config.recent_truncation,
                             older=ctx.config.older_truncation) if state.history else None
    with tenant_scope(ctx, state):
        outcome = ctx.rt.run(create_plan(
            ctx.rt.llm(state.model), state.effective_goal(), tools=tools, context=context,
            desc_length=ctx.config.planner_desc_length, max_steps=ctx.config.max_steps))
    return outcome.plan, outcome.usage


def tenant_scope(ctx: DagContext, state: DagState) -> AbstractContextManager[FlowScope]:
    """The DAG's own calls (planner, analyzer, synthesis, a typed answer's attempts) are its
    tenant's: counted in its cost metrics and its day's spend (as ``dag:<id>``), held against
    its ``cost_per_day_usd`` before each call (``CostCapReached``), paced by its ``rpm`` /
    ``tpm``."""
    quota = quota_of(ctx.rt.settings, state.tenant)
    limits = Limits(rpm=quota.rpm, tpm=quota.tpm) if quota.rpm or quota.tpm else None
    return flow_scope(FlowScope(tenant=state.tenant, tenant_limits=limits, spender=f"dag:{state.dag_id}",
                                cost_per_day_usd=quota.cost_per_day_usd))


def _refused(ctx: DagContext, state: DagState, cap: CostCapReached) -> M.Transition:
    """A dollar cap refused one of the DAG's own calls: its ending (``M.stop_for_cost``)."""
    metrics.budget_stop(ctx.rt.recorder, "dag_tenant_cost")
    return M.stop_for_cost(state, cap.whose, cap.spent_usd, cap.cap_usd, ctx.env())


def _interrupted(ctx: DagContext, state: DagState, env: M.Env) -> M.Transition | None:
    """After a long call: the DAG was cancelled meanwhile ⇒ the cancel transition."""
    if ctx.store.cancel_requested(state.dag_id):
        return M.cancel(state, env)
    return None


def drive_reconcile(ctx: DagContext, dag_id: str, *, tick: int | None = None,
                    repair: bool = False) -> None:
    """Bring an executing DAG up to date with its child runs (and the user), then save."""
    for _ in range(5):
        live = load_live(ctx, dag_id)
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
            # Not made yet: it waits for room among its tenant's active runs (its clock
            # starts when it is made), or its creator died between the launch and the run.
            if ctx.waits_for_room(state.tenant):
                step.started_at = env.now
            t.effects.append(M.child_request(state, step, env))
        elif run["status"] in TERMINAL_STATUSES and run["result"] is not None:
            t += M.complete_step(state, step.id, step.run_id, run, env)
        elif repair and run["status"] == "queued" and run["events"] == 0 \
                and not ctx.rt.leases.alive(run_member(step.run_id)):
            # Made, but its first task may never have been sent: a duplicate is harmless.
            t.effects.append(M.child_request(state, step, env))
    t += M.schedule(state, env)
    return t


def drive_analyze(ctx: DagContext, dag_id: str, round_no: int) -> None:
    live = load_live(ctx, dag_id)
    if live is None or live[1].phase != "analyzing" or live[1].round != round_no:
        return
    rec, state = live
    try:
        with tenant_scope(ctx, state):
            outcome = ctx.rt.run(analyze(ctx.rt.llm(state.model), state.effective_goal(), state.steps,
                                         truncation=ctx.config.analyzer_truncation))
    except CostCapReached as cap:
        ctx.save(state, rec.version, _refused(ctx, state, cap))
        return
    env = ctx.env()
    t = _interrupted(ctx, state, env)
    if t is None:
        t = M.absorb_followups(state, ctx.store.interrupts_after(dag_id, state.interrupt_cursor), env)
        t += M.apply_analysis(state, outcome.analysis, outcome.usage, env)
    ctx.save(state, rec.version, t)


def drive_answer(ctx: DagContext, dag_id: str) -> None:
    live = load_live(ctx, dag_id)
    if live is None or live[1].phase != "synthesizing":
        return
    rec, state = live
    env = ctx.env()
    t = _interrupted(ctx, state, env)
    if t is None and state.output_schema is not None:
        leftovers = [c for _, c in ctx.store.interrupts_after(dag_id, state.interrupt_cursor)]
        try:
            with tenant_scope(ctx, state):
                t = typed_answer(ctx, state, leftovers)
        except CostCapReached as cap:
            t = _refused(ctx, state, cap)
    if t is None:
        t = _answer(ctx, rec, state, dag_id)
    ctx.save(state, rec.version, t)


def _answer(ctx: DagContext, rec: DagRecord, state: DagState, dag_id: str) -> M.Transition:
    """The synthesis and the DAG's end; under ``ANSWER`` guardrails nothing of the answer is
    streamed before they passed it (``workers/dags/guarded.py``)."""
    live = not guarded(ctx)
    text, events = _answer_text(ctx, rec, state, live=live)
    if not live:
        checks, checked, end = check(ctx, state, text)
        events += checks
        if checked is None and end is not None:
            end.events = events + end.events
            return end
        text = checked or ""
        events += _deltas(state, text)
    env = ctx.env()  # the synthesis took time: elapsed is measured after it
    events.append(M.emit(state, "answer", status="done"))
    events.append(M.emit(state, "phase", name="synthesizing", status="done", round=state.round))
    leftovers = [c for _, c in ctx.store.interrupts_after(dag_id, state.interrupt_cursor)]
    events += M.conclude(state, text, env, pending=leftovers or None)
    return M.Transition(events)


def _deltas(state: DagState, text: str, *, start: bool = True) -> list[Any]:
    return ([M.emit(state, "answer", status="start")] if start else []) + [
        M.emit(state, "answer", status="delta", content=c) for c in fallback_chunks(text)]


def _answer_text(ctx: DagContext, rec: DagRecord, state: DagState, *, live: bool = True) -> tuple[str, list[Any]]:
    """The answer and the events still to publish (deltas may already be out). ``live=False``:
    nothing of the answer is published (nor among the events): it is checked first."""
    analysis = state.analysis
    fallback = (analysis.final_answer if analysis else None) or fallback_answer(state.steps)
    if rec.pub_seq > state.seq:
        # An earlier attempt streamed part of the answer and died: what was sent stays
        # sent, and the fallback completes it (as for a run's synthesis).
        sent = "".join(e.data.get("content", "") for _, e in ctx.store.read_events(state.dag_id)
                       if e.channel == "answer" and e.seq > state.seq and e.data.get("status") == "delta")
        state.seq = rec.pub_seq
        return sent + fallback, _fallback_events(state, fallback, "the worker streaming the answer stopped", live)
    if not (analysis and analysis.achieved):
        text = fallback_answer(state.steps)
        return text, _deltas(state, text) if live else []
    if live:
        ctx.store.publish(state.dag_id, [M.emit(state, "answer", status="start")])
    parts: list[str] = []
    try:
        with tenant_scope(ctx, state):
            ctx.rt.run(_stream(ctx, state, parts, live))
    except CostCapReached as cap:  # refused before the call: the steps' results answer
        metrics.budget_stop(ctx.rt.recorder, "dag_tenant_cost")
        return "".join(parts) + fallback, [
            M.emit(state, "error", **M.cost_error(cap.whose, cap.spent_usd, cap.cap_usd, answering=True)),
            *(_deltas(state, fallback, start=False) if live else [])]
    except Exception as exc:  # noqa: BLE001 — a failed synthesis falls back
        log.warning("dag %s: synthesis failed: %s", state.dag_id, exc)
        return "".join(parts) + fallback, _fallback_events(state, fallback, exc, live)
    if not parts:
        return fallback, _fallback_events(state, fallback, "the synthesis returned no text", live)
    return "".join(parts), []


async def _stream(ctx: DagContext, state: DagState, parts: list[str], live: bool = True) -> None:
    messages = synthesis_messages(state.effective_goal(), state.steps, state.analysis,
                                  truncation=ctx.config.synthesis_truncation)
    async for chunk in ctx.rt.llm(state.model).stream_chat(messages):
        if chunk.delta_content:
            parts.append(chunk.delta_content)
            if live:
                ctx.store.publish(state.dag_id, [M.emit(state, "answer", status="delta",
                                                    content=chunk.delta_content)])
        if chunk.usage:
            state.usage = state.usage + Usage.from_dict(chunk.usage)


def _fallback_events(state: DagState, text: str, why: BaseException | str, live: bool = True) -> list[Any]:
    message = why if isinstance(why, str) else f"{type(why).__name__}: {why}"
    return [M.emit(state, "error", kind="synthesis_fallback",
                   message=f"Answer synthesis failed ({message}); using the results instead"),
            *(_deltas(state, text, start=False) if live else [])]


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

