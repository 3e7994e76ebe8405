"""Typed answers in batches (the CLI's and the gateway's) and over a DAG's final answer, on
real workers and the scripted LLM."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest

from reactq.shared.requests import DagRequest, PlanStepIn
from tests.integration.conftest import ROOT, LLMFixture, worker_env
from tests.scripted_server import Reply, first_user_text, reply_text, reply_tool_calls

pytestmark = pytest.mark.integration

LABEL = {"type": "object", "properties": {"label": {"type": "string", "enum": ["bug", "question", "praise"]}},
         "required": ["label"]}


def typed_line(llm: LLMFixture, text: str, attempts: list[Reply]) -> str:
    q = llm.unique(text)
    llm.script(q, [reply_text("draft")])
    llm.script(f"Question: {q}", attempts)
    return q


def label(value: str) -> Reply:
    return reply_tool_calls([("l1", "final_answer", {"label": value})])


def lines(llm: LLMFixture) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Three good lines (one repaired), one with a bad schema, one without a schema."""
    good = [
        {"id": "t1", "query": typed_line(llm, "The app crashes on start", [label("bug")]),
         "output_schema": LABEL},
        {"id": "t2", "query": typed_line(llm, "How do I export?", [label("howto"), label("question")]),
         "output_schema": LABEL},
        {"id": "t3", "query": typed_line(llm, "Love the new UI", [label("praise")]),
         "output_schema": LABEL},
        {"id": "bad", "query": "q", "output_schema": {"type": "object", "required": "label"}},
        {"id": "plain", "query": llm.script(llm.unique("a plain line"), [reply_text("plain")])},
    ]
    expected = {"t1": {"label": "bug"}, "t2": {"label": "question"}, "t3": {"label": "praise"}}
    return good, expected


def check_results(results: list[dict[str, Any]], expected: dict[str, Any]) -> None:
    by_id = {r["id"]: r for r in results}
    for key, value in expected.items():
        assert by_id[key]["status"] == "succeeded", by_id[key]
        assert by_id[key]["output"] == value
        assert json.loads(by_id[key]["answer"]) == value
    assert by_id["bad"]["status"] == "invalid"
    assert "output_schema" in by_id["bad"]["error"] and "not a valid JSON Schema" in by_id["bad"]["error"]
    assert by_id["plain"]["status"] == "succeeded" and by_id["plain"]["output"] is None


def test_a_cli_batch_carries_output_schema_per_line_and_output_per_result(redis_url, llm, workers, tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    good, expected = lines(llm)
    src.write_text("".join(json.dumps(line) + "\n" for line in good))
    cmd = [sys.executable, "-m", "dispatcher", "batch", str(src), "-o", str(out), "-c", "3"]
    res = subprocess.run(cmd, cwd=ROOT, env=worker_env(redis_url, llm), capture_output=True, text=True,
                         timeout=90)
    assert res.returncode == 1 and "4 succeeded, 0 failed, 1 invalid" in res.stderr, res.stderr
    check_results([json.loads(x) for x in out.read_text().splitlines()], expected)


def test_an_http_batch_carries_output_schema_per_line_and_output_per_result(llm, workers, settings):
    from fastapi.testclient import TestClient

    from reactq.dispatcher.http import create_app

    good, expected = lines(llm)
    with TestClient(create_app(settings)) as http:
        res = http.post("/v1/batches", json={"requests": good, "concurrency": 3})
        assert res.status_code == 202, res.text
        assert [i["id"] for i in res.json()["invalid"]] == ["bad"]
        batch_id = res.json()["batch_id"]
        deadline = time.monotonic() + 60
        while (view := http.get(f"/v1/batches/{batch_id}", params={"results": True}).json())["status"] == "running":
            assert time.monotonic() < deadline, view
            time.sleep(0.1)
    check_results(view["results"], expected)


def test_a_dags_final_answer_fits_its_output_schema(llm, workers, settings):
    from reactq.dispatcher.dag import DagDispatcher

    uid = uuid.uuid4().hex[:8]
    goal = f"Summarise the two reviews [{uid}]"
    schema = {"type": "object", "properties": {"average": {"type": "number"},
                                               "verdict": {"type": "string"}},
              "required": ["average", "verdict"]}
    llm.script(f"Goal to evaluate: {goal}", [reply_text(json.dumps(
        {"achieved": True, "confidence": 0.9, "reasoning": "both reviews read"}))])
    llm.script(f"Goal: {goal}\n\nResults:", [  # the answer's attempts (the steps are given)
        reply_tool_calls([("d1", "final_answer", {"average": "four", "verdict": "good"})]),
        reply_tool_calls([("d2", "final_answer", {"average": 4.0, "verdict": "good"})])])
    for k, stars in (("A", 5), ("B", 3)):
        llm.script(f"Task: Read review {k} {uid}", [reply_text(f"{stars} stars")],
                   synthesis=reply_text(f"review {k}: {stars} stars"))
    dags = DagDispatcher(settings)
    handle = dags.submit(DagRequest(goal=goal, output_schema=schema, steps=[
        PlanStepIn(id="A", task=f"Read review A {uid}"), PlanStepIn(id="B", task=f"Read review B {uid}")]))
    events = [e for _, e in handle.events(timeout=60)]
    done = events[-1].data
    assert done["status"] == "succeeded", done
    assert done["output"] == {"average": 4.0, "verdict": "good"}
    assert json.loads(done["answer"]) == done["output"]
    repairs = [e.data for e in events if e.channel == "phase" and e.data.get("name") == "output_repair"]
    assert repairs and repairs[0]["problems"][0] == '$.average: does not satisfy type: "number"'
    assert handle.status()["output"] == done["output"]
    attempts = [r.body for r in llm.server.requests if first_user_text(r.body).startswith(f"Goal: {goal}\n\nResults:")]
    assert "$.average" in attempts[1]["messages"][-1]["content"]


def test_a_bad_dag_schema_is_refused_at_the_door(settings):
    from fastapi.testclient import TestClient

    from reactq.dispatcher.http import create_app

    with TestClient(create_app(settings)) as http:
        res = http.post("/v1/dags", json={"goal": "g", "output_schema": {"type": 3}})
    assert res.status_code == 422 and res.json()["error"]["field"] == "output_schema"
