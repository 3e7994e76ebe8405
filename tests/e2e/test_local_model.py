"""End to end against a real (tiny) model: SmolLM2-135M-Instruct via llama-cpp-python.

The model is weak and its words are not ours to check: these tests assert on the *shape*
of what happened — the event protocol, one terminal state, tool calls parsed into
well-formed calls or the engine's fallbacks taken, what the model was sent — never on what
the model said (how often it is right: ``python -m bench.local_model``, README "First run").

Two servers: the one `reactq run` and the demo start (plain chatml, the registry
``write_registry`` writes: JSON mode with the action's grammar, one tool turn, no synthesis)
and one with llama-cpp-python's ``chatml-function-calling`` for native tool calls.
"""

from __future__ import annotations


from typing import Any

import pytest
from tests.e2e.conftest import FC_MODEL

from reactq.dispatcher.local.demo import load_questions
from reactq.dispatcher.http.metrics import snapshot
from reactq.shared.engine.action_schema import action_schema
from reactq.shared.engine.prompts import ANSWER_NOW
from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.events import Event
from reactq.shared.requests import RunRequest
from tests.metrics_kit import settled

pytestmark = [pytest.mark.local_model, pytest.mark.timeout(300)]

QUERY = "What is 17 * 23? Use the calculator tool."
SAMPLES = {q["id"]: q for q in load_questions(None)}


def run(dispatcher: Any, request: RunRequest) -> tuple[list[Event], dict[str, Any]]:
    handle = dispatcher.submit(request)
    events = [e for _, e in handle.events(timeout=280)]
    return events, handle.result(timeout=10)


def sent_for(recorder: Any, query: str) -> list[list[dict[str, Any]]]:
    """The messages of every request the model got for the run asking ``query``."""
    return [r["messages"] for r in recorder.requests if r.get("messages") and
            any(m.get("content") == query for m in r["messages"] if m["role"] == "user")]


def assert_well_formed(events: list[Event], result: dict[str, Any]) -> None:
    """The contract's event protocol, whatever the model said."""
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert (events[0].channel, events[0].data.get("type"), events[0].data.get("status")) == \
        ("step", "thinking", "start")
    done = [e for e in events if e.channel == "done"]
    assert len(done) == 1 and events[-1] is done[0]
    assert result["status"] in TERMINAL_STATUSES and result["status"] == done[0].data["status"]
    if result["status"] == "failed":
        assert any(e.channel == "error" for e in events)
    # Every LLM turn that started was answered.
    starts = [e.data["iteration"] for e in events if _is(e, "thinking", "start")]
    dones = [e.data["iteration"] for e in events if _is(e, "thinking", "done")]
    assert dones == starts[:len(dones)] and len(starts) - len(dones) <= 1
    # Tool calls: each well-formed, each finished once, with an observation or an error.
    calls = {e.data["tool_call_id"]: e.data for e in events if _is(e, "iteration", "start")}
    finished = [e.data for e in events if _is(e, "iteration", "done")]
    assert sorted(d["tool_call_id"] for d in finished) == sorted(calls)
    for call in calls.values():
        assert isinstance(call["tool_name"], str) and isinstance(call["tool_args"], dict)
    for d in finished:
        assert d["error"] or d["observation"] is not None
    # A succeeded run streamed its answer, and the deltas are the answer.
    if result["status"] == "succeeded":
        answer = [e.data for e in events if e.channel == "answer"]
        assert answer[0]["status"] == "start" and answer[-1]["status"] == "done"
        text = "".join(d.get("content", "") for d in answer if d["status"] == "delta")
        assert text == done[0].data["answer"] == result["answer"]
    assert result["usage"]["llm_calls"] >= 1  # the real server answered, with usage
    assert_every_turn_resolves(events)


def assert_every_turn_resolves(events: list[Event]) -> None:
    """Each LLM reply led somewhere the engine defines: tool calls, another turn (a parse
    retry, a nudge), the answer, or the run's end — whatever the model wrote."""
    for n, e in enumerate(events):
        if not _is(e, "thinking", "done"):
            continue
        nxt = next((x for x in events[n + 1:] if x.channel != "inject"), None)
        assert nxt is not None
        assert (_is(nxt, "iteration", "start") or _is(nxt, "thinking", "start")
                or _is(nxt, "answer", "start") or nxt.channel in ("error", "done", "compact")), nxt


def _is(e: Event, type_: str, status: str) -> bool:
    return e.channel == "step" and e.data.get("type") == type_ and e.data.get("status") == status


def test_a_native_run_and_the_tool_result_in_its_next_request(e2e_dispatcher, e2e_settings, recorder_fc):
    """llama-cpp-python's function-calling template: calls come back parsed (llama.cpp-style,
    repeated ids); the template drops ``tool`` messages, so the entry sends tool results as
    user messages (``tool_results_as = "user"``) and the next request carries the result."""
    before = snapshot(e2e_settings)
    events, result = run(e2e_dispatcher, RunRequest(query=QUERY, tools=["calculator"], mode="native",
                                                    model=FC_MODEL, max_iterations=3,
                                                    completion_check=False))
    assert_well_formed(events, result)
    assert result["mode"] == "native" and result["model"] == FC_MODEL
    tool_ids = [e.data["tool_call_id"] for e in events if _is(e, "iteration", "start")]
    assert len(set(tool_ids)) == len(tool_ids)
    done = [e.data for e in events if _is(e, "iteration", "done") and not e.data["error"]]
    assert done, "SmolLM2 at temperature 0 calls the calculator for this question"
    sent = sent_for(recorder_fc, QUERY)
    assert len(sent) >= 2
    assert any(m["role"] == "user" and done[0]["observation"] in (m.get("content") or "")
               and m["content"].startswith("Result of the tool call calculator") for m in sent[1]), sent[1]
    # The worker metered the real model's calls.
    key = (("model", FC_MODEL),)

    def calls(snap: dict[str, Any]) -> float:
        return float(snap.get("reactq_llm_call_seconds_count", {}).get(key, 0))

    after = settled(lambda: snapshot(e2e_settings), lambda after: calls(after) - calls(before) >= result["usage"]["llm_calls"])
    assert calls(after) - calls(before) >= result["usage"]["llm_calls"]


@pytest.mark.parametrize("sample", ["multiply", "word-count"])
def test_a_sample_question_as_reactq_run_and_the_demo_ask_it(e2e_dispatcher, recorder, sample):
    """The local registry: JSON mode whatever the request's mode (``tool_call = false``), the
    action's schema as the server's grammar (only the question's tool can be called, with
    arguments of its shape), one tool turn, then a turn that may only answer — and that
    turn's request carries the tool's result. The loop's answer is the run's answer."""
    q = SAMPLES[sample]
    request = RunRequest(**{k: v for k, v in q.items() if k not in ("id", "expect")})
    events, result = run(e2e_dispatcher, request)
    assert_well_formed(events, result)
    assert result["mode"] == "json" and result["model"] == "smollm2"
    starts = [e.data for e in events if _is(e, "iteration", "start")]
    assert {d["tool_name"] for d in starts} <= set(q["tools"])  # the grammar's doing
    assert len({d["iteration"] for d in starts}) <= 1  # max_tool_turns = 1
    assert not [e for e in events if e.channel == "error"]  # no synthesis to fall back from
    done = [e.data for e in events if _is(e, "iteration", "done") and not e.data["error"]]
    assert done, f"SmolLM2 with the action grammar calls {q['tools'][0]} first"
    requests = [r for r in recorder.requests if r.get("messages") and
                any(m.get("content") == q["query"] for m in r["messages"] if m["role"] == "user")]
    assert len(requests) >= 2
    first, after_tool = requests[0], requests[len(requests) - 1]
    assert first["response_format"]["type"] == "json_object"
    assert [a["properties"]["tool_name"]["const"] for a in first["response_format"]["schema"]["anyOf"][:-1]] \
        == q["tools"]
    assert first["repeat_penalty"] == 1.0
    assert after_tool["response_format"]["schema"] == action_schema([], answer_only=True)
    # The answer-only turn is told to answer with the result (``loop.llm_messages``).
    assert {"role": "user", "content": f"Observation: {done[0]['observation']}\n{ANSWER_NOW}"} \
        in after_tool["messages"]
    assert not [r for r in requests if r.get("stream")]  # no synthesis call
