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


def test_custom_evaluators_score_and_one_that_raises_scores_zero_with_its_error(llm, workers, redis_url, tmp_path):
    env = worker_env(redis_url, llm, REACTQ_EVALUATORS="tests.integration.eval_kit:EVALUATORS")
    src = write(tmp_path / "custom.jsonl", [case(llm, "short", "ok", "ok"),
                                            case(llm, "long", "a much longer answer", "x")])
    res = reactq("eval", str(src), "-e", "short_answer,explodes", "--json", env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    cases = {c["case_id"]: c for c in got["cases"]}
    assert cases["short"]["scores"]["short_answer"] == {"value": 1.0, "passed": True, "reason": "2 characters"}
    assert cases["long"]["scores"]["short_answer"]["passed"] is False
    boom = cases["short"]["scores"]["explodes"]
    assert boom["value"] == 0 and "RuntimeError" in boom["reason"] and "this evaluator is broken" in boom["reason"]
    assert got["eval"]["scores"]["explodes"] == {"pass_rate": 0.0, "mean": 0.0, "scored": 2}
    assert got["eval"]["status"] == "done"
    without = reactq("eval", str(src), "-e", "short_answer", env=worker_env(redis_url, llm))
    assert without.returncode == 2 and "short_answer" in without.stderr  # not loaded: unknown


def registry(tmp_path: Path, llm: LLMFixture) -> Path:
    """The workers' model plus a priced grader (the judge), both on the scripted server."""
    path = tmp_path / "models.toml"
    path.write_text(f"""
[models.scripted]
base_url = "{llm.server.base_url}"
model = "scripted"
api_key_env = "OPENAI_API_KEY"
roles = ["general", "fast", "reasoning"]
abilities = {{ tool_call = true }}

[models.grader]
base_url = "{llm.server.base_url}"
model = "scripted"
api_key_env = "OPENAI_API_KEY"
roles = ["smart"]
abilities = {{ tool_call = true }}
price = {{ input_per_mtok = 2.0, output_per_mtok = 8.0 }}
""")
    return path


def test_the_judge_grades_with_a_scripted_grader_and_its_cost_is_reported_apart(llm, workers, redis_url, tmp_path, r):
    from reactq.shared.keys import Keys
    from reactq.shared.stores.spend import TenantSpend

    good = case(llm, "good", "Water boils at 100 C at sea level.", "100 degrees Celsius")
    bad = case(llm, "bad", "It boils at 50 C.", "100 degrees Celsius")
    for c, score in ((good, 0.9), (bad, 0.1)):
        llm.script(f"Question:\n{c['query']}", [reply_tool_calls([("g", "grade", {"score": score, "reason": "graded"})])])
    src = write(tmp_path / "judge.jsonl", [good, bad])
    env = worker_env(redis_url, llm, REACTQ_MODELS=str(registry(tmp_path, llm)))
    spend = TenantSpend(r, Keys())
    before = spend.spent("default")
    res = reactq("eval", str(src), "-e", "judge", "--judge-model", "grader", "--json", env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    cases = {c["case_id"]: c for c in got["cases"]}
    assert cases["good"]["scores"]["judge"] == {"value": 0.9, "passed": True, "reason": "graded"}
    assert cases["bad"]["scores"]["judge"]["passed"] is False
    per_case = [cases[k]["judge_cost_usd"] for k in ("good", "bad")]
    assert all(x > 0 for x in per_case)
    assert got["eval"]["judge_cost_usd"] == pytest.approx(sum(per_case))
    assert got["eval"]["cost_usd"] == 0  # the runs' model has no price: the judge's dollars are apart
    assert spend.spent("default") - before == pytest.approx(sum(per_case))
    graded = [b for b in (rec.body for rec in llm.server.requests) if "Reference answer:" in str(b.get("messages"))]
    assert len(graded) == 2 and all("100 degrees Celsius" in str(b["messages"]) for b in graded)
    unknown = reactq("eval", str(src), "-e", "judge", "--judge-model", "nobody", env=env)
    assert unknown.returncode == 2 and "judge_model" in unknown.stderr


def _runs_of(r: Any, tag: str) -> int:
    return sum(1 for raw in r.lrange("reactq-test:toolruns", 0, -1) if json.loads(raw)["tag"] == tag)


def _done_events(dispatcher: Any, run_id: str) -> dict[str, dict[str, Any]]:
    return {e.data["tool_call_id"]: e.data for _, e in dispatcher.store.read_events(run_id, None, count=1000)
            if e.channel == "step" and e.data.get("type") == "iteration" and e.data.get("status") == "done"}


def test_replay_answers_recorded_calls_and_runs_no_tool_unless_live_tools(llm, workers, redis_url, tmp_path, r,
                                                                          dispatcher):
    """Eval A runs charge_card once. Eval B (a changed prompt) replays A: the same call is
    answered from A's record and a call A never made is not executed; with --live-tools it is."""
    env = worker_env(redis_url, llm)
    old, new = f"old-{tmp_path.name[-6:]}", f"new-{tmp_path.name[-6:]}"
    first = llm.script(llm.unique("replay: pay the invoice"),
                       [reply_tool_calls([("p1", "charge_card", {"tag": old, "seconds": 0})]), reply_text("paid")],
                       synthesis=reply_text("paid"))
    res_a = reactq("eval", str(write(tmp_path / "a.jsonl", [{"id": "pay", "query": first, "expected": "paid"}])),
                   "--json", env=env, timeout=120)
    assert res_a.returncode == 0, res_a.stderr
    eval_a = json.loads(res_a.stdout)["eval"]["eval_id"]
    assert _runs_of(r, old) == 1
    # The changed prompt makes the model call the recorded charge again, and one more.
    second = llm.script(llm.unique("replay: pay the invoice, then the fee"),
                        [reply_tool_calls([("q1", "charge_card", {"tag": old, "seconds": 0}),
                                           ("q2", "charge_card", {"tag": new, "seconds": 0})]),
                         reply_text("paid twice")], synthesis=reply_text("paid"))
    # A case eval A never ran has nothing recorded: its call is not executed either.
    fresh = llm.script(llm.unique("replay: a case added since"),
                       [reply_tool_calls([("n1", "charge_card", {"tag": f"{new}-x", "seconds": 0})]),
                        reply_text("ok")], synthesis=reply_text("ok"))
    src_b = write(tmp_path / "b.jsonl", [{"id": "pay", "query": second, "expected": "paid"},
                                         {"id": "added", "query": fresh}])
    res_b = reactq("eval", str(src_b), "--replay-from", eval_a, "--json", env=env, timeout=120)
    assert res_b.returncode == 0, res_b.stderr
    run_b, run_added = (c["run_id"] for c in json.loads(res_b.stdout)["cases"])
    done = _done_events(dispatcher, run_b)
    assert done["q1"].get("reused") is True and done["q1"]["observation"] == f"once {old} done"
    assert "not recorded in eval " + eval_a in done["q2"]["observation"] and not done["q2"].get("reused")
    assert "not recorded in eval " + eval_a in _done_events(dispatcher, run_added)["n1"]["observation"]
    assert _runs_of(r, old) == 1 and _runs_of(r, new) == 0 and _runs_of(r, f"{new}-x") == 0  # no side effect

    res_c = reactq("eval", str(src_b), "--replay-from", eval_a, "--live-tools", "--json", env=env, timeout=120)
    assert res_c.returncode == 0, res_c.stderr
    done = _done_events(dispatcher, json.loads(res_c.stdout)["cases"][0]["run_id"])
    assert done["q1"].get("reused") is True and done["q2"]["observation"].startswith("once ")
    assert _runs_of(r, old) == 1 and _runs_of(r, new) == 1  # only the calls A never made ran
    assert _runs_of(r, f"{new}-x") == 1

    refused = reactq("eval", str(src_b), "--live-tools", env=env)
    assert refused.returncode == 2 and "live_tools" in refused.stderr
    unknown = reactq("eval", str(src_b), "--replay-from", "no-such-eval", env=env)
    assert unknown.returncode == 2 and "replay_from" in unknown.stderr
