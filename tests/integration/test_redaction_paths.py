"""Redaction on every path, on real workers with the PII redactor on (the guardrail tests'
workers, ``test_guardrails.guarded``): nothing the model wrote reaches a client or a store
before the ANSWER guardrails saw it — a typed answer's repairs and failure, the budget's
summary answer, a DAG's final answer (synthesized or typed)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from reactq.shared.requests import DagRequest, PlanStepIn, RunRequest
from tests.integration.conftest import LLMFixture
from tests.integration.test_guardrails import LEAK, guarded  # noqa: F401  (the fixture)
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = pytest.mark.integration
EMAIL = "ada@example.com"


def _published(events: list[Any]) -> str:
    """What a client reads of the answer: every event but the tool calls' own."""
    return json.dumps([(e.channel, e.data) for e in events if e.channel != "step"])


def test_a_typed_answer_that_fails_names_the_path_and_rule_never_the_value(guarded, llm: LLMFixture):  # noqa: F811
    d, _ = guarded
    schema = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}
    q = llm.unique("how old is Ada?")
    llm.script(q, [reply_text("no idea")])
    bad = reply_tool_calls([("x", "final_answer", {"age": EMAIL})])
    llm.script(f"Question: {q}", [bad, bad, bad])
    h = d.submit(RunRequest(query=q, output_schema=schema))
    events = [e for _, e in h.events(timeout=30)]
    result = h.result(timeout=5)
    assert result["status"] == "failed"
    repairs = [e.data for e in events if e.channel == "phase" and e.data.get("phase") == "output_repair"]
    assert repairs and repairs[0]["problems"] == ['$.age: does not satisfy type: "integer"']
    err = next(e.data for e in events if e.channel == "error")
    assert err["kind"] == "output_invalid" and err["path"] == "$.age" and "type" in err["message"]
    assert EMAIL not in _published(events)
    assert EMAIL not in json.dumps(result)


def test_the_budget_summary_is_checked_before_it_is_published(guarded, llm: LLMFixture):  # noqa: F811
    d, _ = guarded
    invented = f"mail_{EMAIL}"  # the summary names the steps, this one included
    q = llm.script(llm.unique("find Ada"), [reply_tool_calls([("c1", invented, {"q": "x"})]),
                                            reply_text("never asked")])
    h = d.submit(RunRequest(query=q, token_budget=1))
    events = [e for _, e in h.events(timeout=30)]
    done = events[-1].data
    assert done["status"] == "succeeded" and any(e.channel == "error" and e.data["kind"] == "budget"
                                                 for e in events)
    assert "[redacted email]" in done["answer"]
    deltas = "".join(e.data["content"] for e in events if e.channel == "answer" and e.data["status"] == "delta")
    assert deltas == done["answer"]
    assert EMAIL not in _published(events)
    assert EMAIL not in json.dumps(h.result(timeout=5))
    checked = [e for e in events if e.channel == "guardrail" and e.data["point"] == "answer"]
    assert checked and max(e.seq for e in checked) < min(e.seq for e in events if e.channel == "answer")


def _dag(d: Any, llm: LLMFixture, *, schema: dict[str, Any] | None = None) -> list[Any]:
    from reactq.dispatcher.dag import DagDispatcher

    uid = uuid.uuid4().hex[:8]
    goal = f"How do I reach Ada? [{uid}]"
    llm.script(f"Goal to evaluate: {goal}", [reply_text(json.dumps(
        {"achieved": True, "confidence": 0.9, "reasoning": "found"}))])
    if schema is None:
        llm.script(f"Goal: {goal}", [reply_text("unused")], synthesis=reply_text(LEAK))
    else:
        llm.script(f"Goal: {goal}\n\nResults:", [reply_tool_calls([("d1", "final_answer", {"contact": EMAIL})])])
    llm.script(f"Task: Look Ada up {uid}", [reply_text("found her")], synthesis=reply_text("in the directory"))
    dags = DagDispatcher(d.settings)
    handle = dags.submit(DagRequest(goal=goal, output_schema=schema,
                                    steps=[PlanStepIn(id="A", task=f"Look Ada up {uid}")]))
    return [e for _, e in handle.events(timeout=60)]


def test_a_dags_synthesized_answer_is_redacted_before_its_first_delta(guarded, llm: LLMFixture):  # noqa: F811
    d, _ = guarded
    events = _dag(d, llm)
    done = events[-1].data
    assert done["status"] == "succeeded", done
    assert "[redacted email]" in done["answer"] and EMAIL not in _published(events)
    deltas = "".join(e.data["content"] for e in events if e.channel == "answer" and e.data.get("status") == "delta")
    assert deltas == done["answer"]
    checked = [e for e in events if e.channel == "guardrail"]
    assert checked and max(e.seq for e in checked) < min(e.seq for e in events if e.channel == "answer")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


def test_a_dags_typed_answer_is_redacted_inside_its_output(guarded, llm: LLMFixture):  # noqa: F811
    d, _ = guarded
    schema = {"type": "object", "properties": {"contact": {"type": "string"}}, "required": ["contact"]}
    events = _dag(d, llm, schema=schema)
    done = events[-1].data
    assert done["status"] == "succeeded", done
    assert done["output"] == {"contact": "[redacted email]"} and EMAIL not in _published(events)
