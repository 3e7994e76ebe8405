"""Planner (S82, T-M1) and analyzer (S91, T-M2) with a scripted LLM."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from reactq.shared.dag.analyzer import analyze, format_step_results
from reactq.shared.dag.planner import create_plan, planner_messages
from reactq.shared.dag.state import StepState
from reactq.shared.llm.testing import ScriptedLLM, text, tool_calls


def plan_json(*steps: dict) -> str:
    return json.dumps({"steps": list(steps)})


# -- T-M1 -----------------------------------------------------------------------------------

async def test_a_plain_text_plan_is_parsed_and_keeps_the_goal() -> None:
    llm = ScriptedLLM([text(plan_json(
        {"id": "s1", "task": "research", "dependencies": []},
        {"id": "s2", "task": "summarise", "dependencies": ["s1"], "tool_hint": "python_exec"}))])
    outcome = await create_plan(llm, "Explain X")
    assert outcome.plan.goal == "Explain X"
    assert [(s.id, s.dependencies, s.tool_hint) for s in outcome.plan.steps] == [
        ("s1", [], None), ("s2", ["s1"], "python_exec")]
    assert outcome.llm_calls == 1


@pytest.mark.parametrize("reply", ["not json", json.dumps({"data": []})])
async def test_no_usable_plan_raises_a_value_error_after_every_level(reply: str) -> None:
    llm = ScriptedLLM([text(reply)], repeat_last=True)
    with pytest.raises(ValueError, match="extraction levels failed"):
        await create_plan(llm, "goal")


async def test_a_planned_cycle_is_refused() -> None:
    llm = ScriptedLLM([text(plan_json({"id": "a", "task": "x", "dependencies": ["b"]},
                                      {"id": "b", "task": "y", "dependencies": ["a"]}))])
    with pytest.raises(ValueError, match="Circular dependency"):
        await create_plan(llm, "goal")


async def test_a_ghost_dependency_is_dropped_with_a_warning() -> None:
    llm = ScriptedLLM([text(plan_json({"id": "s1", "task": "x"},
                                      {"id": "s2", "task": "y", "dependencies": ["s1", "ghost"]}))])
    plan = (await create_plan(llm, "goal")).plan
    assert plan.steps[1].dependencies == ["s1"]
    assert any("ghost" in w for w in plan.warnings)


async def test_an_unknown_model_hint_is_dropped_with_a_warning() -> None:
    llm = ScriptedLLM([text(plan_json({"id": "s1", "task": "x", "model_hint": "turbo_ultra"}))])
    plan = (await create_plan(llm, "goal")).plan
    assert plan.steps[0].model_hint is None
    assert any("turbo_ultra" in w for w in plan.warnings)


async def test_the_planner_forces_create_plan_when_the_model_can_call_functions() -> None:
    llm = ScriptedLLM([tool_calls(("c1", "create_plan", {"steps": [{"id": "s1", "task": "x"}]}))],
                      abilities={"tool_call": True})
    plan = (await create_plan(llm, "goal")).plan
    assert [s.id for s in plan.steps] == ["s1"]
    assert llm.calls[0].kwargs["tool_choice"]["function"]["name"] == "create_plan"


async def test_a_plan_above_the_cap_is_cut_with_a_warning() -> None:
    many = [{"id": f"s{i}", "task": "t"} for i in range(5)]
    plan = (await create_plan(ScriptedLLM([text(plan_json(*many))]), "g", max_steps=3)).plan
    assert [s.id for s in plan.steps] == ["s0", "s1", "s2"]
    assert any("only the first 3" in w for w in plan.warnings)


def test_the_planner_prompt_has_the_goal_tools_and_context() -> None:
    messages = planner_messages("Find Y", tools=[("search", "Search the web. " * 20)],
                                context="--- Round 1 ---", now=datetime(2026, 3, 1))
    system, user = messages[0].content, messages[1].content
    assert "2026-03-01" in system and "2026" in system
    assert user.startswith("Goal: Find Y\n\nAvailable tools:\n- search: Search the web.")
    tool_line = user.split("\n")[3]
    assert len(tool_line) == len("- search: ") + 120 and tool_line.endswith("...")
    assert user.endswith("\n\nAdditional context:\n--- Round 1 ---")


# -- T-M2 -----------------------------------------------------------------------------------

async def test_an_analysis_is_parsed() -> None:
    llm = ScriptedLLM([text(json.dumps({"achieved": True, "confidence": 0.95,
                                        "final_answer": "The capital is Paris.",
                                        "reasoning": "both steps agree"}))])
    result = (await analyze(llm, "capital of France?", [])).analysis
    assert result.achieved and result.confidence == 0.95
    assert result.final_answer == "The capital is Paris." and result.reasoning == "both steps agree"


async def test_an_unparseable_analysis_is_the_default_verdict() -> None:
    llm = ScriptedLLM([text("not json")], repeat_last=True)
    result = (await analyze(llm, "g", [])).analysis
    assert (result.achieved, result.confidence) == (False, 0.0)
    assert "Could not parse" in result.reasoning


@pytest.mark.parametrize(("confidence", "expected"), [(5.0, 1.0), (-0.5, 0.0)])
async def test_confidence_is_clamped(confidence: float, expected: float) -> None:
    llm = ScriptedLLM([text(json.dumps({"achieved": False, "confidence": confidence,
                                        "reasoning": "r"}))])
    assert (await analyze(llm, "g", [])).analysis.confidence == expected


async def test_prose_with_key_values_is_read_by_the_regex_fallback() -> None:
    llm = ScriptedLLM([text("achieved: true, confidence: 0.9")], repeat_last=True)
    result = (await analyze(llm, "g", [])).analysis
    assert result.achieved and result.confidence == 0.9


def test_step_results_are_formatted_and_cut() -> None:
    s1 = StepState(id="s1", task="look up", status="completed", result="x" * 20, tool_hint="web")
    s2 = StepState(id="s2", task="sum", dependencies=["s1"], status="failed", result=None)
    out = format_step_results([s1, s2], truncation=10)
    assert out == ("[s1] (status: completed, deps: none, tool_hint: web)\n  Task: look up\n"
                   "  Result: xxxxxxxxxx\n  [Result truncated]\n\n"
                   "[s2] (status: failed, deps: s1, tool_hint: none)\n  Task: sum\n"
                   "  Result: (no result)")
    assert format_step_results([]) == "(no steps in plan)"
