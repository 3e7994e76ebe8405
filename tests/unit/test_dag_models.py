"""Plan parsing and validation (SPEC S83, S84) and the analysis model (S91)."""

from __future__ import annotations

import pickle

import pytest

from reactq.shared.dag.models import (
    CycleError,
    DuplicateStepError,
    PlanError,
    PlanStep,
    PlanTooLargeError,
    check_unique_ids,
    dedupe_ids,
    find_cycle,
    parse_analysis_data,
    parse_plan_data,
    validate_steps,
)


def steps(*specs: tuple[str, list[str]]) -> list[PlanStep]:
    return [PlanStep(id=i, task=f"do {i}", dependencies=d) for i, d in specs]


# -- S83: lenient parsing -------------------------------------------------------------------

def test_a_wrapped_step_list_is_parsed_with_ids_and_tasks_coerced_to_strings() -> None:
    parsed = parse_plan_data({"steps": [{"id": 1, "task": "research", "dependencies": []},
                                        {"id": "2", "task": "sum up", "dependencies": [1],
                                         "tool_hint": "python_exec"}]})
    assert parsed is not None
    assert [(s.id, s.task, s.dependencies, s.tool_hint) for s in parsed.steps] == [
        ("1", "research", [], None), ("2", "sum up", ["1"], "python_exec")]


def test_a_single_step_object_in_steps_is_recovered_as_a_list() -> None:
    parsed = parse_plan_data({"steps": {"id": "s1", "task": "only"}})
    assert parsed is not None and [s.id for s in parsed.steps] == ["s1"]


def test_double_encoded_steps_are_decoded() -> None:
    parsed = parse_plan_data({"steps": '[{"id": "s1", "task": "a"}, {"id": "s2", "task": "b"}]'})
    assert parsed is not None and [s.id for s in parsed.steps] == ["s1", "s2"]


def test_step_fields_at_the_top_level_are_one_step() -> None:
    parsed = parse_plan_data({"id": "s1", "task": "alone", "dependencies": "s0"})
    assert parsed is not None
    assert parsed.steps[0].dependencies == ["s0"]


@pytest.mark.parametrize("data", [{"data": []}, {"steps": 3}, {"steps": "not json"},
                                  {"steps": [{"id": "s1"}]}, {"steps": ["text"]}])
def test_anything_else_is_unusable(data: dict) -> None:
    assert parse_plan_data(data) is None


def test_an_empty_step_list_is_a_valid_plan() -> None:
    parsed = parse_plan_data({"steps": []})
    assert parsed is not None and parsed.steps == []


def test_an_unknown_model_hint_becomes_none_with_a_warning() -> None:
    parsed = parse_plan_data({"steps": [{"id": "s1", "task": "t", "model_hint": "turbo_ultra"},
                                        {"id": "s2", "task": "t", "model_hint": "fast"}]})
    assert parsed is not None
    assert [s.model_hint for s in parsed.steps] == [None, "fast"]
    assert len(parsed.warnings) == 1 and "turbo_ultra" in parsed.warnings[0]


# -- S84: validation ------------------------------------------------------------------------

def test_dangling_dependencies_are_pruned_with_a_warning_naming_them() -> None:
    out, warnings = validate_steps(steps(("s1", []), ("s2", ["s1", "ghost"])))
    assert out[1].dependencies == ["s1"]
    assert len(warnings) == 1 and "ghost" in warnings[0] and "s2" in warnings[0]


def test_a_two_step_cycle_is_refused_naming_both_steps() -> None:
    with pytest.raises(ValueError, match="Circular dependency") as info:
        validate_steps(steps(("a", ["b"]), ("b", ["a"])))
    assert str(info.value) == "Circular dependency detected among steps: ['a', 'b']"
    assert isinstance(info.value, CycleError) and info.value.steps == ["a", "b"]


def test_a_self_dependency_is_a_cycle() -> None:
    with pytest.raises(CycleError, match=r"\['x'\]"):
        validate_steps(steps(("x", ["x"])))


def test_the_error_names_the_steps_on_the_cycle_not_the_ones_waiting_on_it() -> None:
    plan = steps(("start", []), ("a", ["start", "c"]), ("b", ["a"]), ("c", ["b"]),
                 ("after", ["c"]), ("later", ["after"]))
    assert find_cycle(plan) == ["a", "b", "c"]


def test_a_diamond_is_no_cycle() -> None:
    out, warnings = validate_steps(steps(("A", []), ("B", ["A"]), ("C", ["A"]), ("D", ["B", "C"])))
    assert [s.id for s in out] == ["A", "B", "C", "D"] and warnings == []


def test_repeated_ids_are_refused_or_deduplicated() -> None:
    plan = steps(("a", []), ("a", []), ("b", []))
    with pytest.raises(DuplicateStepError, match=r"\['a'\]"):
        check_unique_ids(plan)
    kept, warnings = dedupe_ids(plan)
    assert [s.id for s in kept] == ["a", "b"] and "'a'" in warnings[0]


@pytest.mark.parametrize("error", [CycleError(["a", "b"]), DuplicateStepError(["a"]),
                                   PlanTooLargeError(60, 50)])
def test_plan_errors_are_value_errors_and_pickle(error: PlanError) -> None:
    assert isinstance(error, ValueError)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error)


# -- S91: analysis data ----------------------------------------------------------------------

@pytest.mark.parametrize(("given", "expected"), [(5.0, 1.0), (-0.5, 0.0), ("0.7", 0.7),
                                                 ("high", 0.0), (None, 0.0)])
def test_confidence_is_clamped_and_non_numbers_are_zero(given: object, expected: float) -> None:
    result = parse_analysis_data({"achieved": True, "confidence": given, "reasoning": "r"})
    assert result is not None and result.confidence == expected


def test_analysis_without_achieved_is_unusable() -> None:
    assert parse_analysis_data({"confidence": 1.0}) is None
