"""The DAG engine as pure transitions: state in, events and effects out.

No I/O happens here. Each function mutates a ``DagState`` and returns a ``Transition``:
the events to publish (each with the next ``seq``) and the effects the Celery shell must
carry out *after* it has saved the state (start a child run, cancel one, send a task).
Saving first is what makes advancing atomic and idempotent: an effect exists only once its
state change has won the compare-and-set, and child run ids are chosen before saving, so a
redelivered task recreates the same run ids instead of new ones.

The types it returns and the `done` payload live in ``effects``.

Round flow: planning → executing → analyzing → (replanning → planning …) → synthesizing
→ done. ``decide`` is the round decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from reactq.shared.engine.synthesis import fallback_chunks
from reactq.shared.events import Event
from reactq.shared.models import Usage
from reactq.shared.requests import DagRequest, RunRequest
from reactq.shared.wire import DAG_ADVANCE as TASK_ADVANCE
from reactq.shared.wire import DAG_ANALYZE as TASK_ANALYZE
from reactq.shared.wire import DAG_ANSWER as TASK_ANSWER
from reactq.shared.wire import DAG_PLAN as TASK_PLAN

from . import prompts as P
from .effects import (
    CancelRun,
    Effect,
    Env,
    Send,
    StartRun,
    Transition,
    conclude,
    emit,
    result_of,
)
from .models import AnalysisResult, ExecutionPlan
from .query import build_step_query, fallback_answer
from .state import FINISHED_STEP, DagState, RoundRecord, StepState

__all__ = ["CancelRun", "Decision", "Effect", "Env", "Send", "StartRun", "Transition",
           "absorb_followups", "apply_analysis", "begin_round", "cancel", "child_request", "complete_step",
           "conclude", "cost_error", "decide", "emit", "fail", "forward_progress", "new_dag", "result_of",
           "schedule", "start_planning", "stop_for_cost", "TASK_ADVANCE", "TASK_ANALYZE", "TASK_ANSWER",
           "TASK_PLAN"]

def new_dag(dag_id: str, request: DagRequest, *, model: str, now: float) -> DagState:
    """A fresh DAG in round 1, phase planning; ``model`` is the smart model's name."""
    return DagState(dag_id=dag_id, goal=request.goal, model=model, tools=request.tools,
                    max_concurrency=request.max_concurrency, max_rounds=request.max_rounds,
                    metadata=request.metadata, started_at=now, output_schema=request.output_schema)


def start_planning(state: DagState) -> Transition:
    state.phase = "planning"
    return Transition([emit(state, "phase", name="planning", status="start", round=state.round)])


# -- executing --------------------------------------------------------------------------

def begin_round(state: DagState, plan: ExecutionPlan, env: Env) -> Transition:
    """The plan is in: record it, announce it and launch what can run."""
    t = Transition([emit(state, "warning", kind="plan", message=w) for w in plan.warnings])
    state.steps = [StepState(id=s.id, task=s.task, dependencies=s.dependencies,
                             tool_hint=s.tool_hint, model_hint=s.model_hint) for s in plan.steps]
    state.phase = "executing"
    t.events.append(emit(state, "phase", name="planning", status="done", round=state.round,
                         steps=[{"id": s.id, "task": s.task, "deps": s.dependencies,
                                 "tool_hint": s.tool_hint, "model_hint": s.model_hint}
                                for s in state.steps]))
    t.events.append(emit(state, "phase", name="executing", status="start", round=state.round))
    t += schedule(state, env)
    return t


def schedule(state: DagState, env: Env) -> Transition:
    """Time out, cascade failures, launch ready steps, or end the round."""
    t = Transition()
    if state.phase != "executing":
        return t
    t += _expire(state, env)
    t += _cascade(state, env)
    running = sum(1 for s in state.steps if s.status == "running")
    done = {s.id for s in state.steps if s.status == "completed"}
    ready = sorted((s for s in state.steps
                    if s.status == "pending" and all(d in done for d in s.dependencies)),
                   key=lambda s: s.id)
    for step in ready[: max(0, state.max_concurrency - running)]:
        t += _launch(state, step, env)
        running += 1
    if running:
        t.effects += _arm_tick(state, env)
        return t
    for step in state.steps:
        if step.status == "pending":
            t.events.append(_finish_step(state, step, "failed", P.COULD_NOT_RUN, env))
    t += _finish_executing(state, env)
    return t


def complete_step(state: DagState, step_id: str, run_id: str, run: dict[str, Any] | None,
                  env: Env) -> Transition:
    """A child run ended (``run`` = its stored status; None = it vanished). Stale ⇒ no-op."""
    step = state.step(step_id)
    if step is None or step.run_id != run_id or step.status != "running":
        return Transition()
    result = (run or {}).get("result") or {}
    usage = {k: v for k, v in (result.get("usage") or {}).items()
             if isinstance(v, int | float) and not isinstance(v, bool)}
    step.usage = usage
    state.usage = state.usage + Usage(**{k: v for k, v in usage.items() if k in Usage.model_fields})
    status = (run or {}).get("status")
    if status == "succeeded":
        event = _finish_step(state, step, "completed", str(result.get("answer") or ""), env)
    else:
        why = result.get("error") or ("the child run disappeared" if run is None
                                      else f"the child run ended {status}")
        event = _finish_step(state, step, "failed", str(why), env)
    t = Transition([event])
    t += schedule(state, env)
    return t


def forward_progress(state: DagState, step: StepState, entries: Sequence[tuple[str, Event]],
                     env: Env) -> list[Event]:
    """A child's tool iterations as ``step_progress`` events (thinking is not forwarded)."""
    out = []
    cut = env.config.progress_observation_chars
    for stream_id, event in entries:
        step.cursor = stream_id
        data = event.data
        if event.channel != "step" or data.get("type") != "iteration":
            continue
        extra: dict[str, Any] = {k: data[k] for k in ("iteration", "status", "tool_name", "tool_call_id",
                                      "tool_args", "error", "iter_elapsed") if k in data}
        if isinstance(data.get("observation"), str):
            extra["observation"] = data["observation"][:cut]
        out.append(emit(state, "step_progress", event="progress", step_id=step.id,
                        run_id=step.run_id, type="iteration", **extra))
    return out


def child_request(state: DagState, step: StepState, env: Env) -> StartRun:
    """The child run of a launched step. Deterministic from the state (its dependencies'
    results are final), so a lost child run can be recreated exactly."""
    assert step.run_id is not None
    query = build_step_query(state.effective_goal(), step, state.steps,
                             max_context_chars=env.config.max_message_chars,
                             multiplier=env.config.context_multiplier)
    request = RunRequest(query=query, model=step.model, tools=state.tools,
                         max_iterations=env.config.step_max_iterations,
                         metadata={**state.metadata, "_dag": {
                             "dag_id": state.dag_id, "step_id": step.id, "round": state.round}})
    return StartRun(step.id, step.run_id, request.model_dump(mode="json"))


def _launch(state: DagState, step: StepState, env: Env) -> Transition:
    step.status = "running"
    step.run_id = env.new_id()
    step.model = env.model_for(step.model_hint)
    step.started_at = env.now
    event = emit(state, "step_progress", event="started", step_id=step.id, run_id=step.run_id,
                 task=step.task, model=step.model, started_at=step.started_at, round=state.round)
    return Transition([event], [child_request(state, step, env)])


def _expire(state: DagState, env: Env) -> Transition:
    """A step still running after the timeout fails (its child run is cancelled)."""
    t = Transition()
    limit = env.config.step_timeout
    for step in state.steps:
        if step.status == "running" and step.started_at is not None \
                and env.now - step.started_at > limit:
            t.events.append(_finish_step(state, step, "failed",
                                         f"Step execution timed out after {limit:g}s", env))
            if step.run_id:
                t.effects.append(CancelRun(step.run_id))
    return t


def _cascade(state: DagState, env: Env) -> Transition:
    """Pending steps depending on a failed step fail, transitively."""
    t = Transition()
    changed = True
    while changed:
        changed = False
        failed = {s.id for s in state.steps if s.status == "failed"}
        for step in state.steps:
            bad = [d for d in step.dependencies if d in failed]
            if step.status == "pending" and bad:
                names = ", ".join(f"'{d}'" for d in bad)
                t.events.append(_finish_step(state, step, "failed",
                                             f"Skipped: dependency step {names} failed", env))
                changed = True
    return t


def _finish_step(state: DagState, step: StepState, status: Literal["completed", "failed", "skipped"],
                 result: str, env: Env) -> Event:
    step.status = status
    step.result = result
    if status != "completed":
        step.error = result
    step.completed_at = env.now
    if step.started_at is not None:
        step.duration = round(env.now - step.started_at, 2)
    name = {"completed": "completed", "failed": "failed", "skipped": "skipped"}[status]
    return emit(state, "step_progress", event=name, step_id=step.id, run_id=step.run_id,
                status=status, task=step.task, result=result, started_at=step.started_at,
                completed_at=step.completed_at, duration=step.duration, usage=step.usage or None)


def _arm_tick(state: DagState, env: Env) -> list[Effect]:
    """Keep one periodic check per executing DAG (re-armed when it is overdue: a worker
    holding the delayed message may have died)."""
    interval = env.config.tick_seconds
    grace = max(5.0, 3 * interval)
    if state.tick_due and env.now <= state.tick_due + grace:
        return []
    state.tick += 1
    state.tick_due = env.now + interval
    return [Send(TASK_ADVANCE, [state.dag_id, state.tick], countdown=interval)]


def _finish_executing(state: DagState, env: Env) -> Transition:
    state.tick_due = 0.0
    results = [{"id": s.id, "task": s.task, "status": s.status, "result": s.result,
                "started_at": s.started_at, "completed_at": s.completed_at,
                "duration": s.duration} for s in state.steps]
    t = Transition([emit(state, "phase", name="executing", status="done", round=state.round,
                         results=results)])
    if state.injected:
        # The user changed the requirements: judging the old goal would be wasted work.
        state.history.append(RoundRecord(round=state.round, steps=list(state.steps)))
        t += _replan(state, "the user sent a follow-up", free=True)
        return t
    state.phase = "analyzing"
    t.events.append(emit(state, "phase", name="analyzing", status="start", round=state.round))
    t.effects.append(Send(TASK_ANALYZE, [state.dag_id, state.round]))
    return t


# -- analysis and the round decision ----------------------------------------------------

Decision = Literal["stop", "replan", "replan_free"]


def decide(analysis: AnalysisResult, *, injected: bool, auto_replans: int, max_rounds: int,
           stop_confidence: float) -> Decision:
    """In order — except that a user follow-up always re-plans: the analyzer judged
    the goal without it."""
    if injected:
        return "replan_free"
    if analysis.achieved:
        return "stop"
    if auto_replans >= max_rounds - 1:
        return "stop"
    if analysis.confidence >= stop_confidence:
        return "stop"
    return "replan"


def apply_analysis(state: DagState, analysis: AnalysisResult, usage: Usage, env: Env) -> Transition:
    state.analysis = analysis
    state.usage = state.usage + usage
    state.history.append(RoundRecord(round=state.round, steps=list(state.steps), analysis=analysis))
    t = Transition([emit(state, "phase", name="analyzing", status="done", round=state.round,
                         achieved=analysis.achieved, confidence=analysis.confidence,
                         reasoning=analysis.reasoning)])
    decision = decide(analysis, injected=state.injected, auto_replans=state.auto_replans,
                      max_rounds=state.max_rounds, stop_confidence=env.config.stop_confidence)
    if decision == "stop":
        state.phase = "synthesizing"
        t.events.append(emit(state, "phase", name="synthesizing", status="start", round=state.round))
        t.effects.append(Send(TASK_ANSWER, [state.dag_id]))
        return t
    reason = ("the user sent a follow-up" if decision == "replan_free" else
              f"not achieved (confidence {analysis.confidence:g})")
    t += _replan(state, reason, free=decision == "replan_free")
    return t


def _replan(state: DagState, reason: str, *, free: bool) -> Transition:
    if not free:
        state.auto_replans += 1
    state.round += 1
    state.injected = False
    state.steps = []
    state.analysis = None
    t = Transition([emit(state, "phase", name="replanning", status="start", round=state.round,
                         reason=reason)])
    t += start_planning(state)
    t.effects.append(Send(TASK_PLAN, [state.dag_id, state.round]))
    return t


# -- user actions -------------------------------------------------------------------------

def absorb_followups(state: DagState, messages: Sequence[tuple[str, str]], env: Env) -> Transition:
    """Interrupts ``(cursor, content)``: they extend the goal. While executing, steps not
    yet started are skipped (running ones finish) and the round ends in a free re-plan."""
    t = Transition()
    if not messages:
        return t
    for cursor, content in messages:
        state.followups.append(content)
        state.interrupt_cursor = cursor
        t.events.append(emit(state, "inject", type="inject", content=content, phase=state.phase))
    if state.phase in ("executing", "analyzing"):
        state.injected = True
    if state.phase == "executing":
        for step in state.steps:
            if step.status == "pending":
                t.events.append(_finish_step(state, step, "skipped", P.SKIPPED_BY_USER, env))
        t += schedule(state, env)
    return t


def cancel(state: DagState, env: Env) -> Transition:
    """Cancel the DAG now: running child runs are cancelled, pending steps skipped."""
    t = Transition()
    for step in state.steps:
        if step.status == "pending":
            t.events.append(_finish_step(state, step, "skipped", P.SKIPPED_BY_CANCEL, env))
        elif step.status == "running":
            t.events.append(_finish_step(state, step, "failed", "Cancelled with the DAG", env))
            if step.run_id:
                t.effects.append(CancelRun(step.run_id))
    t.events += conclude(state, fallback_answer(state.steps), env, status="cancelled")
    return t


def fail(state: DagState, message: str, env: Env, *, kind: str = "pipeline_error",
         **details: Any) -> Transition:
    """End the DAG on an error of the pipeline itself: ``error`` (with ``details``) then ``done``."""
    t = Transition()
    for step in state.steps:
        if step.status == "running":
            t.events.append(_finish_step(state, step, "failed", message, env))
            if step.run_id:
                t.effects.append(CancelRun(step.run_id))
        elif step.status not in FINISHED_STEP:
            t.events.append(_finish_step(state, step, "skipped", message, env))
    state.error = message
    t.events.append(emit(state, "error", message=message, kind=kind, **details))
    t.events += conclude(state, message, env, status="failed")
    return t


def cost_error(whose: str, spent_usd: float, cap_usd: float, *, answering: bool) -> dict[str, Any]:
    """The ``error`` event's data for a dollar cap that refused one of the DAG's own calls
    (as a run's: ``kind: "budget"``, ``cap``, ``spent_usd``, ``cost_budget_usd``, ``message``)."""
    what = "Cost budget" if whose == "run" else "The tenant's daily cost cap"
    then = "answering with the steps' results" if answering else "no further call is made"
    return {"kind": "budget", "cap": whose, "spent_usd": round(spent_usd, 6), "cost_budget_usd": cap_usd,
            "message": f"{what} reached: ${spent_usd:.4f} of ${cap_usd:.4f} spent; {then}"}


def stop_for_cost(state: DagState, whose: str, spent_usd: float, cap_usd: float, env: Env) -> Transition:
    """A dollar cap refused the planner's or the analyzer's call: no further call. Steps that
    finished give the answer (their results, as when the synthesis fails); with none the DAG
    fails."""
    if not any(s.status == "completed" for s in state.steps):
        data = cost_error(whose, spent_usd, cap_usd, answering=False)
        message, kind = data.pop("message"), data.pop("kind")
        return fail(state, message, env, kind=kind, **data)
    text = fallback_answer(state.steps)
    events = [emit(state, "error", **cost_error(whose, spent_usd, cap_usd, answering=True)),
              emit(state, "answer", status="start"),
              *(emit(state, "answer", status="delta", content=c) for c in fallback_chunks(text)),
              emit(state, "answer", status="done")]
    return Transition(events + conclude(state, text, env))
