"""The pure parts of evals: cases, the built-in evaluators, summaries and comparisons."""

from __future__ import annotations

import pytest

import reactq
from reactq.shared.errors import ConfigError, RequestError
from reactq.shared.evals.cases import EvalCase, InvalidCase, parse_case_line, run_fields
from reactq.shared.evals.report import compare, summarize
from reactq.shared.evals.scoring import BUILTINS, CaseResult, apply, load_evaluators, resolve


def score(name: str, case: dict, **result):
    c = EvalCase.model_validate({"id": "c", "query": "q", **case})
    return apply(BUILTINS[name], c, CaseResult(case_id="c", run_id="r", status="succeeded", **result))


def test_exact_trims_and_compares_typed_output_as_json():
    assert score("exact", {"expected": "Paris"}, answer="  Paris\n").passed
    assert not score("exact", {"expected": "Paris"}, answer="paris").passed
    typed = {"expected": '{"a": 1}', "output_schema": {"type": "object"}}
    assert score("exact", typed, answer='{"a":1}', output={"a": 1}).passed
    assert not score("exact", {**typed, "expected": {"a": 2}}, output={"a": 1}).passed


def test_contains_regex_and_json_schema():
    assert score("contains", {"expected": ["rome", "ITALY"]}, answer="Rome, Italy").passed
    missing = score("contains", {"expected": ["rome", "france"]}, answer="Rome, Italy")
    assert not missing.passed and "france" in missing.reason
    assert score("regex", {"expected": r"\b\d{3}\b"}, answer="it is 391.").passed
    bad = score("regex", {"expected": "("}, answer="x")
    assert bad.value == 0 and "raised" in bad.reason
    schema = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
    assert score("json_schema", {"output_schema": schema}, output={"n": 1}).passed
    assert score("json_schema", {"output_schema": schema}, output={"n": "x"}).reason.startswith("$.n")


def test_tool_calls_are_matched_in_order_with_args_as_a_subset():
    calls = [{"name": "search", "args": {"q": "x", "k": 3}}, {"name": "add", "args": {"a": 1, "b": 2}}]
    want = {"expected_tools": [{"name": "search", "args": {"q": "x"}}, {"name": "add"}]}
    assert score("tool_calls", want, tool_calls=calls).passed
    assert not score("tool_calls", {"expected_tools": [{"name": "add"}, {"name": "search"}]}, tool_calls=calls).passed
    assert not score("tool_calls", {"expected_tools": [{"name": "add", "args": {"a": 5}}]}, tool_calls=calls).passed


def test_an_evaluator_that_does_not_apply_gives_no_score():
    for name in ("exact", "contains", "regex", "json_schema", "tool_calls", "max_turns", "max_cost_usd"):
        assert score(name, {}, answer="x") is None, name
    assert score("max_turns", {"metadata": {"max_turns": 2}}, turns=2).passed
    assert not score("max_cost_usd", {"metadata": {"max_cost_usd": 0.01}}, cost_usd=0.02).passed


def test_custom_evaluators_return_bool_float_or_score_and_one_that_raises_scores_zero():
    @reactq.evaluator("short")
    def short(case, result):
        return len(result.answer or "") < 5

    @reactq.evaluator("half")
    def half(case, result):
        return 0.5

    @reactq.evaluator("boom")
    def boom(case, result):
        raise KeyError("nope")

    c = EvalCase(id=1, query="q")
    r = CaseResult(case_id="1", run_id="r", status="succeeded", answer="abc")
    assert apply(short, c, r).passed and apply(half, c, r).passed
    s = apply(boom, c, r)
    assert s.value == 0 and "KeyError" in s.reason and "nope" in s.reason
    assert apply(reactq.evaluator("x")(lambda c, r: reactq.Score(0.2, "meh")), c, r).reason == "meh"
    assert apply(reactq.evaluator("y")(lambda c, r: 7), c, r).value == 0  # out of range: an error


def test_evaluators_are_resolved_by_name_and_loaded_from_the_setting():
    with pytest.raises(RequestError) as exc:
        resolve(["exact", "vibes"], {})
    assert exc.value.field == "evaluators" and "vibes" in str(exc.value)
    with pytest.raises(ConfigError, match="REACTQ_EVALUATORS entry"):
        load_evaluators("reactq.shared.evals.scoring:JUDGE")
    assert load_evaluators("") == {}


def test_a_bad_case_names_its_line_and_field():
    got = parse_case_line('{"id": "a", "query": "", "colour": 1}', 7)
    assert isinstance(got, InvalidCase) and got.id == "a"
    assert "line 7" in got.error and "query" in got.error and "colour" in got.error
    assert "line 2" in parse_case_line("{oops", 2).error
    ok = parse_case_line('{"id": 3, "query": "q", "tools": ["echo"], "metadata": {"k": 1}}', 1)
    assert run_fields(ok, model="m", system_prompt="be brief") == {
        "id": 3, "query": "q", "metadata": {"k": 1}, "tools": ["echo"], "model": "m", "system_prompt": "be brief"}


def rec(case_id: str, passed: bool, value: float, status: str = "succeeded", **extra):
    return {"case_id": case_id, "line": 1, "run_id": "r", "status": status, "passed": passed,
            "scores": {"exact": {"value": value, "passed": passed, "reason": None}}, "latency_ms": 100.0,
            "cost_usd": 0.5, **extra}


def test_a_summary_counts_cases_and_the_judge_cost_apart():
    cases = [rec("a", True, 1.0), rec("b", False, 0.0, judge_cost_usd=0.25),
             {"case_id": None, "line": 3, "status": "invalid", "scores": {}, "passed": False}]
    s = summarize(cases, ["exact"], total=3)
    assert s["counts"]["invalid"] == 1 and s["counts"]["passed"] == 1
    assert s["pass_rate"] == 0.5 and s["scores"]["exact"] == {"pass_rate": 0.5, "mean": 0.5, "scored": 2}
    assert s["cost_usd"] == 1.0 and s["judge_cost_usd"] == 0.25


def test_compare_names_exactly_the_cases_that_flipped():
    a = [rec("x", True, 1.0), rec("y", False, 0.0), rec("z", True, 1.0), rec("only-a", True, 1.0)]
    b = [rec("x", False, 0.0), rec("y", True, 1.0), rec("z", True, 1.0), rec("only-b", True, 1.0)]
    got = compare({"eval_id": "A", **summarize(a, ["exact"], total=4)}, a,
                  {"eval_id": "B", **summarize(b, ["exact"], total=4)}, b)
    assert got["fixed"] == ["y"] and got["broken"] == ["x"]
    assert [c["case_id"] for c in got["cases"]] == ["x", "y"]
    assert got["cases"][0]["scores"]["exact"]["a"]["value"] == 1.0
    assert got["only_in_a"] == ["only-a"] and got["only_in_b"] == ["only-b"]
    assert got["deltas"]["pass_rate"] == 0.0
