"""The DAG state machine, without Redis or Celery (SPEC S85, S87, S92, S93a)."""

from __future__ import annotations

import itertools
from typing import Any

from reactq.shared.dag import machine as M
from reactq.shared.dag.config import DagConfig
from reactq.shared.dag.models import AnalysisResult, ExecutionPlan, PlanStep
from reactq.shared.dag.state import DagState
from reactq.shared.events import Event
from reactq.shared.models import Usage
from reactq.shared.requests import DagRequest

ROLES = {None: "general", "fast": "fast-model", "reasoning": "deep-model"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.ids = itertools.count(1)

    def env(self, **config: Any) -> M.Env:
        return M.Env(config=DagConfig(**config), now=self.now, model_for=lambda h: ROLES[h],
                     new_id=lambda: f"run{next(self.ids)}")


def plan(*specs: tuple[str, list[str]] | tuple[str, list[str], str]) -> ExecutionPlan:
    return ExecutionPlan(goal="g", steps=[
        PlanStep(id=s[0], task=f"task {s[0]}", dependencies=s[1],
                 model_hint=s[2] if len(s) > 2 else None) for s in specs])  # type: ignore[misc]


def dag(**kw: Any) -> DagState:
    return M.new_dag("d1", DagRequest(goal="g", **kw), model="smart", now=1000.0)


def started(t: M.Transition) -> list[str]:
    return [e.step_id for e in t.effects if isinstance(e, M.StartRun)]


def ok(answer: str) -> dict[str, Any]:
    return {"status": "succeeded", "result": {"answer": answer, "usage": {"total_tokens": 10,
                                                                           "llm_calls": 2}}}


def by_id(state: DagState) -> dict[str, tuple[str, str | None]]:
    return {s.id: (s.status, s.result) for s in state.steps}


def test_a_diamond_runs_b_and_c_together_then_d_with_both_results() -> None:
    clock = Clock()
    state = dag()
    t = M.begin_round(state, plan(("A", []), ("B", ["A"], "fast"), ("C", ["A"], "reasoning"),
                                  ("D", ["B", "C"])), clock.env())
    assert started(t) == ["A"]
    t = M.complete_step(state, "A", "run1", ok("a-out"), clock.env())
    assert started(t) == ["B", "C"]
    assert [(s.id, s.model) for s in state.steps if s.status == "running"] == [
        ("B", "fast-model"), ("C", "deep-model")]
    t = M.complete_step(state, "B", "run2", ok("b-out"), clock.env())
    assert started(t) == []  # D still waits for C
    t = M.complete_step(state, "C", "run3", ok("c-out"), clock.env())
    [start_d] = [e for e in t.effects if isinstance(e, M.StartRun)]
    query = start_d.request["query"]
    assert "[B] (completed) task B\nResult: b-out" in query and "Result: c-out" in query
    assert start_d.request["model"] == "general"
    assert start_d.request["metadata"]["_dag"] == {"dag_id": "d1", "step_id": "D", "round": 1}
    assert start_d.request["max_iterations"] == 15
    t = M.complete_step(state, "D", "run4", ok("d-out"), clock.env())
    assert state.phase == "analyzing"
    assert [e for e in t.effects if isinstance(e, M.Send)] == [M.Send(M.TASK_ANALYZE, ["d1", 1])]
    assert state.usage.total_tokens == 40 and state.usage.llm_calls == 8


def test_a_second_notification_for_the_same_run_changes_nothing() -> None:
    clock = Clock()
    state = dag()
    M.begin_round(state, plan(("A", []), ("B", ["A"])), clock.env())
    M.complete_step(state, "A", "run1", ok("x"), clock.env())
    again = M.complete_step(state, "A", "run1", ok("x"), clock.env())
    assert again.events == [] and again.effects == []
    wrong_run = M.complete_step(state, "B", "run-other", ok("x"), clock.env())
    assert wrong_run.events == []


def test_at_most_max_concurrency_steps_run_and_they_start_in_id_order() -> None:
    clock = Clock()
    state = dag(max_concurrency=2)
    t = M.begin_round(state, plan(("c", []), ("a", []), ("b", []), ("d", [])), clock.env())
    assert started(t) == ["a", "b"]
    t = M.complete_step(state, "a", "run1", ok("x"), clock.env())
    assert started(t) == ["c"]


def test_a_failed_step_fails_exactly_its_dependents_and_the_rest_goes_on() -> None:
    clock = Clock()
    state = dag()
    M.begin_round(state, plan(("A", []), ("B", ["A"]), ("C", ["A"]), ("D", ["B"]), ("E", ["C"]),
                              ("F", ["D", "E"])), clock.env())
    M.complete_step(state, "A", "run1", ok("a"), clock.env())
    failed = {"status": "failed", "result": {"error": "LLMError: 400", "usage": {}}}
    t = M.complete_step(state, "B", "run2", failed, clock.env())
    assert by_id(state)["B"] == ("failed", "LLMError: 400")
    assert by_id(state)["D"] == ("failed", "Skipped: dependency step 'B' failed")
    assert by_id(state)["F"] == ("failed", "Skipped: dependency step 'D' failed")
    assert by_id(state)["C"][0] == "running"
    assert {e.data["step_id"] for e in t.events if e.data.get("event") == "failed"} == {"B", "D", "F"}
    M.complete_step(state, "C", "run3", ok("c"), clock.env())
    M.complete_step(state, "E", "run4", ok("e"), clock.env())
    assert state.phase == "analyzing"
    assert [s.status for s in state.steps] == ["completed", "failed", "completed", "failed",
                                               "completed", "failed"]


def test_a_step_running_past_its_timeout_fails_and_its_run_is_cancelled() -> None:
    clock = Clock()
    state = dag()
    M.begin_round(state, plan(("A", []), ("B", ["A"])), clock.env(REACTQ_DAG_STEP_TIMEOUT=600))
    clock.now += 601
    t = M.schedule(state, clock.env(REACTQ_DAG_STEP_TIMEOUT=600))
    assert by_id(state)["A"] == ("failed", "Step execution timed out after 600s")
    assert M.CancelRun("run1") in t.effects
    assert by_id(state)["B"][1] == "Skipped: dependency step 'A' failed"


def test_executing_arms_one_periodic_check_and_rearms_only_when_it_is_overdue() -> None:
    clock = Clock()
    state = dag()
    t = M.begin_round(state, plan(("A", []), ("B", [])), clock.env())
    assert [e for e in t.effects if isinstance(e, M.Send)] == [
        M.Send(M.TASK_ADVANCE, ["d1", 1], countdown=2.0)]
    assert M.complete_step(state, "A", "run1", ok("x"), clock.env()).effects == []
    clock.now += 60
    assert M.Send(M.TASK_ADVANCE, ["d1", 2], countdown=2.0) in M.schedule(state, clock.env()).effects


def test_an_empty_plan_goes_straight_to_analysis() -> None:
    state = dag()
    M.begin_round(state, plan(), Clock().env())
    assert state.phase == "analyzing"


def test_events_follow_s93a_with_one_seq_each() -> None:
    clock = Clock()
    state = dag()
    events: list[Event] = M.start_planning(state).events
    events += M.begin_round(state, plan(("A", [])), clock.env()).events
    events += M.complete_step(state, "A", "run1", ok("x"), clock.env()).events
    events += M.apply_analysis(state, AnalysisResult(achieved=True, confidence=0.9), Usage(),
                               clock.env()).events
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [(e.channel, e.data.get("name") or e.data.get("event"), e.data.get("status"))
            for e in events] == [
        ("phase", "planning", "start"), ("phase", "planning", "done"),
        ("phase", "executing", "start"), ("step_progress", "started", None),
        ("step_progress", "completed", "completed"), ("phase", "executing", "done"),
        ("phase", "analyzing", "start"), ("phase", "analyzing", "done"),
        ("phase", "synthesizing", "start")]
    assert events[1].data["steps"] == [{"id": "A", "task": "task A", "deps": [],
                                        "tool_hint": None, "model_hint": None}]
    assert events[3].data["run_id"] == "run1" and events[4].data["result"] == "x"


# -- S92 ---------------------------------------------------------------------------------------

def decide(achieved: bool, confidence: float, *, auto: int = 0, injected: bool = False) -> str:
    return M.decide(AnalysisResult(achieved=achieved, confidence=confidence), injected=injected,
                    auto_replans=auto, max_rounds=3, stop_confidence=0.8)


def test_the_round_decision() -> None:
    assert decide(True, 0.1) == "stop"
    assert decide(False, 0.3) == "replan"
    assert decide(False, 0.85) == "stop"
    assert decide(False, 0.3, auto=2) == "stop"  # 3 rounds = 2 autonomous re-plans
    assert decide(True, 0.99, injected=True) == "replan_free"


def run_round(state: DagState, clock: Clock, analysis: AnalysisResult) -> M.Transition:
    M.begin_round(state, plan(("A", [])), clock.env())
    M.complete_step(state, "A", f"run{state.round * 10}", ok("x"), clock.env())
    for step in state.steps:  # the ids the clock handed out
        if step.status == "running":
            M.complete_step(state, step.id, step.run_id or "", ok("x"), clock.env())
    return M.apply_analysis(state, analysis, Usage(), clock.env())


def test_not_achieved_at_low_confidence_replans_until_the_round_budget_is_spent() -> None:
    clock = Clock()
    state = dag(max_rounds=3)
    low = AnalysisResult(achieved=False, confidence=0.3, reasoning="gaps")
    t = run_round(state, clock, low)
    assert state.round == 2 and state.phase == "planning"
    assert t.events[-2].data == {"seq": t.events[-2].seq, "name": "replanning", "status": "start",
                                 "round": 2, "reason": "not achieved (confidence 0.3)"}
    assert M.Send(M.TASK_PLAN, ["d1", 2]) in t.effects
    run_round(state, clock, low)
    t = run_round(state, clock, low)
    assert state.round == 3 and state.phase == "synthesizing"
    assert [r.round for r in state.history] == [1, 2, 3]
    assert M.Send(M.TASK_ANSWER, ["d1"]) in t.effects


def test_a_follow_up_while_executing_skips_pending_steps_and_replans_for_free() -> None:
    clock = Clock()
    state = dag(max_rounds=1)
    M.begin_round(state, plan(("A", []), ("B", ["A"])), clock.env())
    t = M.absorb_followups(state, [("1-0", "also cover Z")], clock.env())
    assert t.events[0].data == {"seq": t.events[0].seq, "type": "inject",
                                "content": "also cover Z", "phase": "executing"}
    assert by_id(state)["B"] == ("skipped", "Skipped — user changed requirements")
    assert by_id(state)["A"][0] == "running"  # running steps finish normally
    t = M.complete_step(state, "A", "run1", ok("x"), clock.env())
    assert state.round == 2 and state.phase == "planning" and state.auto_replans == 0
    assert state.effective_goal() == "g\n\nFollow-up from the user: also cover Z"
    assert M.Send(M.TASK_PLAN, ["d1", 2]) in t.effects


def test_cancel_skips_pending_steps_cancels_running_ones_and_ends_the_dag() -> None:
    clock = Clock()
    state = dag()
    M.begin_round(state, plan(("A", []), ("B", [])), clock.env(), )
    M.complete_step(state, "A", "run1", ok("a-out"), clock.env())
    state.steps.append(state.steps[1].model_copy(update={"id": "C", "status": "pending",
                                                         "run_id": None}))
    t = M.cancel(state, clock.env())
    assert M.CancelRun("run2") in t.effects
    assert by_id(state)["C"][0] == "skipped" and by_id(state)["B"][0] == "failed"
    done = t.events[-1]
    assert done.channel == "done" and done.data["status"] == "cancelled"
    assert done.data["answer"] == "**A**: a-out" and state.phase == "done"


def test_done_reports_answer_achieved_confidence_rounds_usage_and_elapsed() -> None:
    clock = Clock()
    state = dag()
    run_round(state, clock, AnalysisResult(achieved=True, confidence=0.9))
    clock.now += 2.5
    [done] = M.conclude(state, "the answer", clock.env())
    assert done.data == {"seq": done.seq, "answer": "the answer", "achieved": True,
                         "confidence": 0.9, "rounds": 1, "elapsed": 2.5, "status": "succeeded",
                         "error": None, "output": None,
                         "usage": {"prompt_tokens": 0, "completion_tokens": 0,
                                   "total_tokens": 10, "llm_calls": 2,
                                   "cached_tokens": 0, "cost_usd": 0.0}}


def test_a_pipeline_error_ends_the_dag_failed_with_an_error_event() -> None:
    clock = Clock()
    state = dag()
    t = M.fail(state, "Pipeline error: ValueError: boom", clock.env())
    assert [e.channel for e in t.events] == ["error", "done"]
    assert state.status == "failed" and t.events[-1].data["achieved"] is False
