"""Evals on real workers and the scripted model: ``reactq eval`` (the table, the report, the
exit codes), scores equal to what the scripted answers make them, invalid lines reported while
the rest run, custom evaluators (one that raises) and the judge with its cost apart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import LLMFixture, worker_env
from tests.integration.test_cli import reactq
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = pytest.mark.integration


def case(llm: LLMFixture, case_id: str, answer: str, expected: Any, **extra: Any) -> dict[str, Any]:
    """A case whose run answers ``answer`` (the scripted synthesis)."""
    q = llm.script(llm.unique(f"eval case {case_id}"), [reply_text("done")], synthesis=reply_text(answer))
    return {"id": case_id, "query": q, "expected": expected, **extra}


def write(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def dataset(llm: LLMFixture, tmp_path: Path) -> Path:
    """Four cases (three answered as expected, one not) and two bad lines."""
    return write(tmp_path / "cases.jsonl", [
        case(llm, "paris", "Paris", "Paris"),
        case(llm, "rome", "The capital is Rome.", "Rome"),
        "{not json",
        case(llm, "oslo", "Oslo", "Oslo"),
        {"id": "no-query", "expected": "x"},
        case(llm, "bern", "Zurich", "Bern"),
    ])


def test_an_eval_scores_every_case_as_the_answers_make_it_and_reports_bad_lines(llm, workers, redis_url, tmp_path):
    env = worker_env(redis_url, llm, COLUMNS="200")
    report = tmp_path / "report.json"
    res = reactq("eval", str(dataset(llm, tmp_path)), "--evaluators", "exact,contains", "--name", "capitals",
                 "-o", str(report), env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "line 3:" in res.stderr and "line 5: query: Field required" in res.stderr
    got = json.loads(report.read_text())
    view, cases = got["eval"], {c["case_id"]: c for c in got["cases"] if c["status"] != "invalid"}
    assert view["status"] == "done" and view["name"] == "capitals"
    assert view["counts"] == {"total": 6, "done": 6, "passed": 2, "succeeded": 4, "failed": 0, "cancelled": 0,
                              "skipped": 0, "invalid": 2}
    # exact: Paris and Oslo; contains: Paris, Rome, Oslo. A case passes when both pass.
    assert view["scores"]["exact"] == {"pass_rate": 0.5, "mean": 0.5, "scored": 4}
    assert view["scores"]["contains"] == {"pass_rate": 0.75, "mean": 0.75, "scored": 4}
    assert view["pass_rate"] == 0.5
    assert {k for k, c in cases.items() if c["passed"]} == {"paris", "oslo"}
    assert cases["rome"]["scores"]["exact"]["passed"] is False and cases["rome"]["scores"]["contains"]["passed"]
    assert all(c["run_id"] and c["turns"] == 1 for c in cases.values())
    assert view["latency_ms"]["p50"] is not None and view["latency_ms"]["p95"] >= view["latency_ms"]["p50"]
    assert "exact" in res.stdout and "50.0%" in res.stdout and "75.0%" in res.stdout

    shown = reactq("eval", "show", view["eval_id"], "--json", env=env)
    assert shown.returncode == 0 and json.loads(shown.stdout)["scores"] == view["scores"]
    table = reactq("eval", "show", view["eval_id"], env=env)
    assert table.returncode == 0 and "bern" in table.stdout and "rome" in table.stdout


def test_fail_under_and_bad_input_set_the_exit_code(llm, workers, redis_url, tmp_path):
    env = worker_env(redis_url, llm)
    src = write(tmp_path / "two.jsonl", [case(llm, "a", "yes", "yes"), case(llm, "b", "no", "yes")])
    low = reactq("eval", str(src), "--fail-under", "0.75", "--json", env=env, timeout=120)
    assert low.returncode == 1, low.stderr
    assert json.loads(low.stdout)["eval"]["pass_rate"] == 0.5 and "below --fail-under" in low.stderr
    ok = reactq("eval", str(src), "--fail-under", "0.5", env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    unknown = reactq("eval", str(src), "--evaluators", "exact,vibes", env=env)
    assert unknown.returncode == 2 and "vibes" in unknown.stderr
    missing = reactq("eval", str(tmp_path / "nope.jsonl"), env=env)
    assert missing.returncode == 2
    empty = reactq("eval", str(write(tmp_path / "bad.jsonl", ["[1]"])), env=env)
    assert empty.returncode == 2 and "line 1" in empty.stderr and "no valid case" in empty.stderr
    assert reactq("eval", "show", "no-such-eval", env=env).returncode == 2


def test_tool_calls_and_turn_limits_read_the_run_itself(llm, workers, redis_url, tmp_path):
    env = worker_env(redis_url, llm)
    q = llm.script(llm.unique("eval tools"), [reply_tool_calls([("c1", "echo", {"text": "hi"})]),
                                               reply_tool_calls([("c2", "add", {"a": 2, "b": 3})]),
                                               reply_text("done")], synthesis=reply_text("5"))
    src = write(tmp_path / "tools.jsonl", [
        {"id": "in-order", "query": q, "expected_tools": [{"name": "echo"}, {"name": "add", "args": {"a": 2}}],
         "metadata": {"max_turns": 3}},
        {"id": "wrong-order", "query": q, "expected_tools": [{"name": "add"}, {"name": "echo"}],
         "metadata": {"max_turns": 2}},
        {"id": "wrong-args", "query": q, "expected_tools": [{"name": "add", "args": {"a": 9}}]},
    ])
    res = reactq("eval", str(src), "-e", "tool_calls,max_turns", "--json", env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    cases = {c["case_id"]: c for c in json.loads(res.stdout)["cases"]}
    assert cases["in-order"]["scores"]["tool_calls"]["passed"] and cases["in-order"]["scores"]["max_turns"]["passed"]
    assert not cases["wrong-order"]["scores"]["tool_calls"]["passed"]
    assert not cases["wrong-order"]["scores"]["max_turns"]["passed"]  # 3 turns, over 2
    assert not cases["wrong-args"]["scores"]["tool_calls"]["passed"]
    assert "max_turns" not in cases["wrong-args"]["scores"]  # no metadata.max_turns: not scored
    assert cases["in-order"]["turns"] == 3
