"""Step queries (S86), re-plan context (S92) and the not-achieved answer (S93)."""

from __future__ import annotations

from reactq.shared.dag.models import AnalysisResult
from reactq.shared.dag.query import (
    MAX_QUERY_CHARS,
    build_step_query,
    fallback_answer,
    replan_context,
    synthesis_messages,
)
from reactq.shared.dag.state import RoundRecord, StepState


def diamond() -> list[StepState]:
    return [
        StepState(id="A", task="fetch data", status="completed", result="rows: 3"),
        StepState(id="B", task="count rows", dependencies=["A"], status="completed", result="3"),
        StepState(id="C", task="list names", dependencies=["A"], status="failed", result=None),
        StepState(id="D", task="write report", dependencies=["B", "C", "ghost"], tool_hint="python_exec"),
    ]


def test_the_step_query_carries_goal_task_tool_and_dependency_results() -> None:
    steps = diamond()
    query = build_step_query("Summarise the table", steps[3], steps)
    assert query == (
        "Original goal: Summarise the table\n\n"
        "Task: write report\n\n"
        "Suggested tool: python_exec\n\n"
        "Context from previous steps (use this data directly — do NOT re-run tools that "
        "produced these results):\n"
        "[B] (completed) count rows\nResult: 3\n\n"
        "[C] (failed) list names\nResult: (no result)")


def test_a_root_step_query_has_no_context_block() -> None:
    steps = diamond()
    assert build_step_query(None, steps[0], steps) == "Task: fetch data"


def test_long_dependency_context_is_cut_with_a_marker() -> None:
    steps = [StepState(id="A", task="t", status="completed", result="x" * 5000),
             StepState(id="B", task="u", dependencies=["A"])]
    query = build_step_query("g", steps[1], steps, max_context_chars=1000)
    assert query.endswith("\n[Dependency context truncated]")
    context = query.split("results):\n", 1)[1]
    assert len(context) == 1000 + len("\n[Dependency context truncated]")


def test_structured_results_get_a_larger_budget() -> None:
    table = "| a | b |\n|---|---|\n" + "| 1 | 2 |\n" * 300
    steps = [StepState(id="A", task="t", status="completed", result=table),
             StepState(id="B", task="u", dependencies=["A"])]
    query = build_step_query("g", steps[1], steps, max_context_chars=1000, multiplier=3.0)
    context = query.split("results):\n", 1)[1]
    assert len(context) == 3000 + len("\n[Dependency context truncated]")


def test_a_step_query_never_exceeds_the_run_request_limit() -> None:
    steps = [StepState(id="A", task="t", status="completed", result="```\n" + "y" * 200_000),
             StepState(id="B", task="u", dependencies=["A"])]
    query = build_step_query("g", steps[1], steps, max_context_chars=50_000, multiplier=3.0)
    assert len(query) <= MAX_QUERY_CHARS and query.endswith("[Dependency context truncated]")


def test_replan_context_cuts_the_latest_round_less_than_older_ones() -> None:
    old = RoundRecord(round=1, steps=[StepState(id="a", task="t", status="completed", result="o" * 300)],
                      analysis=AnalysisResult(achieved=False, confidence=0.3, reasoning="missing X"))
    new = RoundRecord(round=2, steps=[StepState(id="b", task="t", status="completed", result="n" * 600),
                                      StepState(id="c", task="t", status="failed")],
                      analysis=AnalysisResult(achieved=False, confidence=0.4, reasoning="still no X"))
    text = replan_context([old, new], recent=500, older=200)
    assert text.startswith("--- Round 1 ---\nAnalysis: missing X\nAchieved: False, Confidence: 0.3\n")
    assert f"[a] status=completed: {'o' * 200}... (truncated)" in text
    assert f"[b] status=completed: {'n' * 500}... (truncated)" in text
    assert "[c] status=failed: (no output)" in text
    assert text.endswith("Please create a revised plan that addresses the gaps identified above.")


def test_the_not_achieved_answer_is_the_completed_results() -> None:
    steps = diamond()
    assert fallback_answer(steps) == "**A**: rows: 3\n\n---\n\n**B**: 3"
    assert fallback_answer([StepState(id="x", task="t", status="failed")]) == "(goal not achieved)"


def test_the_synthesis_prompt_holds_goal_results_and_assessment() -> None:
    messages = synthesis_messages("Summarise", diamond(), AnalysisResult(reasoning="solid"),
                                  truncation=3)
    user = messages[1].content
    assert user.startswith("Goal: Summarise\n\nResults:\n[A] (completed) fetch data\nrow")
    assert "[Result truncated]" in user and user.endswith("Assessment: solid")
    assert "meta-commentary" in messages[0].content
