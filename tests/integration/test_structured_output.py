"""Typed answers (``output_schema``) on real workers, the real openai client over HTTP and the
scripted LLM: valid at once, repaired with the validator's message, never valid, refused at the
door; the same events as the in-process shell; the stored result and ``GET /v1/runs/{id}``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reactq.shared.requests import RunRequest
from tests.integration.conftest import LLMFixture
from tests.scripted_server import Reply, first_user_text, reply_text, reply_tool_calls

pytestmark = pytest.mark.integration

INVOICE = {"type": "object", "properties": {
    "vendor": {"type": "string"}, "total": {"type": "number", "minimum": 0},
    "currency": {"type": "string", "enum": ["EUR", "USD"]}},
    "required": ["vendor", "total", "currency"], "additionalProperties": False}
GOOD = {"vendor": "ACME", "total": 120.5, "currency": "EUR"}


def attempt(mode: str, data: dict[str, Any]) -> Reply:
    """One answer attempt's reply: the forced function call (native) or the JSON (JSON mode)."""
    if mode == "native":
        return reply_tool_calls([("ans1", "final_answer", data)])
    return reply_text(json.dumps(data))


def typed_script(llm: LLMFixture, text: str, mode: str, attempts: list[Reply]) -> str:
    """A run whose loop answers at once, then whose answer attempts get ``attempts``."""
    q = llm.unique(text)
    draft = "ACME, 120.50 EUR"
    llm.script(q, [reply_text(draft) if mode == "native" else
                   reply_text(json.dumps({"type": "final_answer", "answer": draft}))])
    llm.script(f"Question: {q}", attempts)  # the attempts' first message starts so
    return q


def attempt_requests(llm: LLMFixture, q: str) -> list[dict[str, Any]]:
    return [r.body for r in llm.server.requests if first_user_text(r.body).startswith(f"Question: {q}")]


@pytest.mark.parametrize("mode", ["native", "json"])
def test_a_valid_answer_is_the_output_in_done_the_result_and_the_api(mode, workers, dispatcher, llm, settings):
    from fastapi.testclient import TestClient

    from reactq.dispatcher.http import create_app

    q = typed_script(llm, "extract the invoice", mode, [attempt(mode, GOOD)])
    handle = dispatcher.submit(RunRequest(query=q, mode=mode, output_schema=INVOICE))
    events = [e for _, e in handle.events(timeout=30)]
    done = events[-1].data
    assert done["status"] == "succeeded" and done["output"] == GOOD
    assert json.loads(done["answer"]) == GOOD
    assert "".join(e.data["content"] for e in events if e.channel == "answer" and e.data["status"] == "delta") \
        == done["answer"]
    assert handle.result(timeout=5)["output"] == GOOD
    with TestClient(create_app(settings)) as http:
        body = http.get(f"/v1/runs/{handle.run_id}").json()
    assert body["result"]["output"] == GOOD
    (req,) = attempt_requests(llm, q)
    assert "stream" not in req or not req["stream"]
    if mode == "native":
        assert req["tools"][0]["function"]["parameters"] == INVOICE
        assert req["tool_choice"] == {"type": "function", "function": {"name": "final_answer"}}
    else:
        assert req["response_format"] == {"type": "json_object"}


@pytest.mark.parametrize("mode", ["native", "json"])
def test_an_invalid_answer_is_repaired_and_the_repair_carries_the_validators_message(
        mode, workers, dispatcher, llm):
    bad = {"vendor": "ACME", "total": "120.50", "currency": "EUR"}
    q = typed_script(llm, "extract the invoice, repaired", mode, [attempt(mode, bad), attempt(mode, GOOD)])
    handle = dispatcher.submit(RunRequest(query=q, mode=mode, output_schema=INVOICE))
    events = [e for _, e in handle.events(timeout=30)]
    result = handle.result(timeout=5)
    assert result["status"] == "succeeded" and result["output"] == GOOD
    first, second = attempt_requests(llm, q)
    assert "$.total: '120.50' is not of type 'number'" in second["messages"][-1]["content"]
    assert json.loads(second["messages"][-2]["content"]) == bad
    repairs = [e.data for e in events if e.channel == "phase" and e.data.get("phase") == "output_repair"]
    assert repairs == [{"phase": "output_repair", "attempt": 1, "seq": repairs[0]["seq"],
                        "problems": ['$.total: does not satisfy type: "number"']}]
    # usage counts both attempts (and the loop's turn)
    assert result["usage"]["llm_calls"] == 3


@pytest.mark.parametrize("mode", ["native", "json"])
def test_an_answer_never_valid_fails_the_run_output_invalid(mode, workers, dispatcher, llm):
    bad = {"vendor": "ACME", "total": -1, "currency": "GBP"}
    q = typed_script(llm, "extract the invoice, never valid", mode, [attempt(mode, bad)])
    handle = dispatcher.submit(RunRequest(query=q, mode=mode, output_schema=INVOICE))
    events = [e for _, e in handle.events(timeout=30)]
    result = handle.result(timeout=5)
    assert result["status"] == "failed" and result["output"] is None
    (err,) = [e.data for e in events if e.channel == "error"]
    assert err["kind"] == "output_invalid" and err["path"] == "$.currency"
    assert err["message"].startswith("The answer is not valid against output_schema after 3 attempts: "
                                      '$.currency: does not satisfy enum: ["EUR", "USD"]')
    assert "GBP" not in err["message"]  # the path and the rule, never the value
    assert not [e for e in events if e.channel == "answer"]
    assert len(attempt_requests(llm, q)) == 3  # REACTQ_OUTPUT_REPAIRS = 2


def test_a_bad_schema_is_refused_at_the_door_naming_the_field(settings, r):
    from fastapi.testclient import TestClient

    from reactq.dispatcher.http import create_app

    before = r.zcard("reactq:runs")
    with TestClient(create_app(settings)) as http:
        bad = http.post("/v1/runs", json={"query": "q", "output_schema": {"type": "objekt"}})
        huge = http.post("/v1/runs", json={"query": "q", "output_schema": {
            "type": "object", "description": "x" * 70_000}})
        not_an_object = http.post("/v1/runs", json={"query": "q", "output_schema": ["a"]})
    for res in (bad, huge, not_an_object):
        assert res.status_code == 422, res.text
        assert res.json()["error"]["field"] == "output_schema"
    assert "not a valid JSON Schema (draft 2020-12)" in bad.text
    assert "the limit is 65536 bytes" in huge.text
    assert r.zcard("reactq:runs") == before


async def test_both_shells_emit_the_same_events_for_a_repaired_typed_answer(
        workers, dispatcher, llm, settings, monkeypatch):
    from reactq.shared.engine.deps import EngineDeps
    from reactq.shared.events import ListSink
    from reactq.shared.inprocess import run_local
    from reactq.shared.llm.registry import load_registry
    from reactq.shared.settings import EngineConfig
    from reactq.shared.tools.loader import default_registry
    from tests.integration.conftest import SELECTION_THRESHOLD
    from tests.integration.test_distributed_run import _normalized

    monkeypatch.setenv("REACT_TOOL_SELECTION_THRESHOLD", SELECTION_THRESHOLD)
    bad = {"vendor": "ACME", "total": 1}
    attempts = [attempt("native", bad), attempt("native", GOOD)]
    q_local = typed_script(llm, "two shells, typed", "native", attempts)
    q_dist = typed_script(llm, "two shells, typed", "native", attempts)

    deps = EngineDeps(llm=load_registry(settings).get_default(), registry=default_registry(settings),
                      config=EngineConfig())
    sink = ListSink()
    state = await run_local(RunRequest(query=q_local, output_schema=INVOICE), deps, sink=sink)
    assert state.status == "succeeded" and state.output == GOOD

    handle = dispatcher.submit(RunRequest(query=q_dist, output_schema=INVOICE))
    remote = [e for _, e in handle.events(timeout=30)]

    def norm(events: list[Any]) -> list[Any]:
        return [(c, s, {**d, **({"problems": e.data.get("problems"), "output": e.data.get("output")})})
                for (c, s, d), e in zip(_normalized(events), events, strict=True)]

    assert norm(remote) == norm(sink.events)


def test_the_token_budget_counts_every_attempt_and_stops_between_them(workers, dispatcher, llm):
    usage = {"prompt_tokens": 80, "completion_tokens": 20, "total_tokens": 100}
    bad = {"vendor": "ACME", "total": "lots", "currency": "EUR"}
    q = llm.unique("extract the invoice on a budget")
    llm.script(q, [reply_text("draft", usage=usage)])
    llm.script(f"Question: {q}", [reply_tool_calls([("b1", "final_answer", bad)], usage=usage),
                                  reply_tool_calls([("b2", "final_answer", GOOD)], usage=usage)])
    handle = dispatcher.submit(RunRequest(query=q, output_schema=INVOICE, token_budget=150))
    events = [e for _, e in handle.events(timeout=30)]
    result = handle.result(timeout=5)
    assert result["status"] == "failed" and result["output"] is None
    (err,) = [e.data for e in events if e.channel == "error"]
    assert err["kind"] == "budget" and err["spent"] == 200
    assert len(attempt_requests(llm, q)) == 1  # the repair never started


def test_reactq_run_takes_an_output_schema_and_its_json_done_line_carries_output(
        redis_url, workers, llm, tmp_path):
    import subprocess
    import sys

    from tests.integration.conftest import ROOT, worker_env

    q = typed_script(llm, "extract the invoice from the CLI", "native", [attempt("native", GOOD)])
    schema_file = tmp_path / "invoice.schema.json"
    schema_file.write_text(json.dumps(INVOICE))
    res = subprocess.run([sys.executable, "-m", "dispatcher", "run", q, "--output-schema", str(schema_file),
                          "--json"], cwd=ROOT, env=worker_env(redis_url, llm), capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    done = json.loads(res.stdout.splitlines()[-1])
    assert done["event"] == "done" and done["data"]["output"] == GOOD
    bad = subprocess.run([sys.executable, "-m", "dispatcher", "run", "q", "--output-schema", '{"type": 5}'],
                         cwd=ROOT, env=worker_env(redis_url, llm), capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "output_schema" in bad.stderr
