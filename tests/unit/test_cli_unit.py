"""CLI behaviour that needs no Redis and no workers, run in-process (fast): bad usage is
exit 2 naming the field and the limit; the catalogs; rendering helpers; batch line parsing."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from reactq.dispatcher.batch.files import ResultFile
from reactq.dispatcher.batch.items import parse_lines
from reactq.dispatcher.cli import app
from reactq.dispatcher.cli.render import RunRenderer, screenful
from reactq.shared.events import Event

ENV = {"REACTQ_MODEL": "scripted", "OPENAI_API_KEY": "test-key",
       "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "REACTQ_TOOLS": "tests.integration.tools:TOOLS",
       # Never reached by these tests: every case is refused before any Redis call.
       "REACTQ_REDIS_URL": "redis://127.0.0.1:1/0"}


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.mark.parametrize(("args", "words"), [
    (["run", ""], ["query", "at least 1"]),
    (["run", "   "], ["query", "non-whitespace"]),
    (["run", "x", "--max-iterations", "0"], ["max_iterations", "greater than or equal to 1"]),
    (["run", "x", "--max-iterations", "201"], ["max_iterations", "less than or equal to 200"]),
    # Unknown tool/model names are checked against the workers' catalog in Redis: see
    # tests/integration/test_cli.py. In-process runs check the local registries.
    (["run", "x", "--local", "--tools", "nope"], ["tools", "nope"]),
    (["run", "x", "--local", "--model", "gpt-9"], ["model", "gpt-9"]),
    (["run", "x", "--mode", "fast"], ["--mode"]),
    (["run"], ["QUERY"]),
    (["frobnicate"], ["No such command"]),
    (["batch", "/no/such/file.jsonl", "-o", "out.jsonl"], ["does not exist"]),
    (["batch", "pyproject.toml"], ["--output"]),
])
def test_bad_usage_exits_2_naming_the_field_and_the_limit(runner, args, words):
    res = runner.invoke(app, args, env=ENV)
    assert res.exit_code == 2, res.output
    text = res.output.replace("\n", " ")
    for w in words:
        assert w.lower() in text.lower(), text


def test_models_and_tools_list_the_registries_without_secrets(runner):
    tools = json.loads(runner.invoke(app, ["tools", "--json"], env=ENV).output)
    assert {"calculator", "slow", "charge_card"} <= {t["name"] for t in tools}
    assert next(t for t in tools if t["name"] == "charge_card")["idempotent"] is False
    models = json.loads(runner.invoke(app, ["models", "--json"], env=ENV).output)
    assert [m["name"] for m in models] == ["scripted"]
    pretty = runner.invoke(app, ["models"], env=ENV).output
    assert "scripted" in pretty and "test-key" not in pretty


def _render(events: list[tuple[str, dict]], height: int = 12) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=80, height=height, force_terminal=False)
    r = RunRenderer(console)
    for i, (channel, data) in enumerate(events, 1):
        r.handle(Event(channel, {**data, "seq": i}), f"{1_000_000 + i * 250}-0")
    r.close()
    return buf.getvalue()


def test_the_renderer_prints_steps_tools_answer_and_footer():
    text = _render([
        ("step", {"type": "thinking", "status": "start", "iteration": 1}),
        ("step", {"type": "thinking", "status": "done", "iteration": 1, "reasoning": "Compute it."}),
        ("step", {"type": "iteration", "status": "start", "iteration": 1, "tool_name": "calculator",
                  "tool_args": {"expression": "17*23"}, "tool_call_id": "c1"}),
        ("step", {"type": "iteration", "status": "done", "iteration": 1, "tool_name": "calculator",
                  "tool_args": {"expression": "17*23"}, "tool_call_id": "c1", "observation": "391",
                  "error": None, "iter_elapsed": 0.01}),
        ("answer", {"status": "start"}),
        ("answer", {"status": "delta", "content": "It is "}),
        ("answer", {"status": "delta", "content": "391."}),
        ("answer", {"status": "done"}),
        ("done", {"answer": "It is 391.", "iterations": 2, "status": "succeeded", "elapsed": 1.5,
                  "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}),
    ])
    assert "#1 Compute it. 0.25s" in text  # timed from the stream ids
    assert 'calculator {"expression":"17*23"} 0.01s' in text and "→ 391" in text
    assert "It is 391." in text
    assert "succeeded · 2 iterations · 120 tokens (100 in / 20 out) · 1.50s" in text


def test_a_long_observation_is_cut_to_a_screenful():
    obs = "\n".join(f"line {i}" for i in range(100))
    text = _render([("step", {"type": "iteration", "status": "done", "tool_name": "t", "tool_args": {},
                              "observation": obs, "error": None})], height=12)
    assert "line 5" in text and "line 50" not in text and "more lines" in text
    assert screenful("x" * 500, lines=3, width=10) == "x" * 9 + "…"


def test_batch_lines_report_their_line_number_and_field(tmp_path: Path):
    lines = [json.dumps({"id": "a", "query": "q"}), "", "{nope", json.dumps([1]),
             json.dumps({"query": "q", "max_iterations": 0}), json.dumps({"id": "a", "query": "again"}),
             json.dumps({"id": True, "query": "q"}), json.dumps({"query": "no id"})]
    items = parse_lines(lines)
    errors = {it.line: it.error for it in items if it.error}
    assert items[0].request is not None and items[0].id == "a"
    assert errors[3].startswith("line 3: not valid JSON")
    assert errors[4] == "line 4: expected a JSON object, got list"
    assert errors[5].startswith("line 5: max_iterations: Input should be greater than or equal to 1")
    assert "duplicate id 'a'" in errors[6]
    assert errors[7].startswith("line 7: id:")
    assert items[-1].id == 8 and items[-1].request is not None  # no id ⇒ the line number


def test_a_torn_last_result_line_is_dropped_on_resume(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    out.write_text(json.dumps({"id": "a", "line": 1, "status": "succeeded"}) + "\n" + '{"id": "b", "li')
    rf = ResultFile(out)
    rf.load()
    assert rf.done_ids == {"a"} and out.read_text().endswith("}\n")


def test_dag_forwards_to_the_dag_module_when_it_exists(runner, monkeypatch):
    import sys
    import types

    import typer

    seen: dict[str, object] = {}

    def dag(plan: str = typer.Argument(None), goal: str = typer.Option(None, "--goal")) -> None:
        seen.update(plan=plan, goal=goal)

    fake = types.SimpleNamespace(dag=dag)
    monkeypatch.setitem(sys.modules, "reactq.dispatcher.cli.dags", fake)
    # `from reactq.dispatcher.cli import dags` prefers the package attribute once the real one loaded.
    monkeypatch.setattr(sys.modules["reactq.dispatcher.cli"], "dags", fake, raising=False)
    res = runner.invoke(app, ["dag", "--goal", "plan a trip"], env=ENV)
    assert res.exit_code == 0, res.output
    assert seen == {"plan": None, "goal": "plan a trip"}


def test_the_gateway_mounts_the_dag_router():
    from fastapi.testclient import TestClient

    from reactq.dispatcher.http import create_app
    from reactq.shared.settings import Settings

    app_ = create_app(Settings(redis_url="redis://127.0.0.1:1/0"))
    paths = set(app_.openapi()["paths"])
    assert {"/v1/dags", "/v1/dags/{dag_id}", "/v1/dags/{dag_id}/events"} <= paths
    with TestClient(app_) as client:
        assert client.get("/v1/dags/d1").status_code == 503  # nothing listens on port 1
        assert client.get("/readyz").status_code == 503  # nothing listens on port 1
        assert client.get("/healthz").status_code == 200  # liveness needs no Redis
