"""End to end against a real (tiny) model: SmolLM2-135M-Instruct via llama-cpp-python.

The model is weak and its words are not ours to check: these tests assert on the *shape*
of what happened — the event protocol, one terminal state, tool calls parsed into
well-formed calls or the engine's fallbacks taken — never on what the model said.
"""

from __future__ import annotations

from typing import Any

import pytest

from reactq.dispatcher.metrics import snapshot
from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.events import Event
from reactq.shared.requests import RunRequest

pytestmark = [pytest.mark.local_model, pytest.mark.timeout(300)]

QUERY = "What is 12 * 7? Use the calculator tool."


def run(dispatcher: Any, mode: str) -> tuple[list[Event], dict[str, Any]]:
    request = RunRequest(query=QUERY, tools=["calculator"], mode=mode, max_iterations=3)
    handle = dispatcher.submit(request)
    events = [e for _, e in handle.events(timeout=240)]
    return events, handle.result(timeout=10)


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


def test_a_native_run_against_smollm2(e2e_dispatcher, e2e_settings):
    before = snapshot(e2e_settings)
    events, result = run(e2e_dispatcher, "native")
    assert_well_formed(events, result)
    assert result["mode"] == "native" and result["model"] == "smollm2"
    tool_ids = [e.data["tool_call_id"] for e in events if _is(e, "iteration", "start")]
    # Native calls came back parsed from the model's (llama.cpp-style, repeated-id) output,
    # or the model answered without a tool and the loop took the final-answer path.
    assert tool_ids or any(e.channel == "answer" for e in events) or result["status"] == "failed"
    assert len(set(tool_ids)) == len(tool_ids)
    # The worker metered the real model's calls.
    after = snapshot(e2e_settings)
    key = (("model", "smollm2"),)
    calls = after["reactq_llm_call_seconds_count"].get(key, 0) - \
        before.get("reactq_llm_call_seconds_count", {}).get(key, 0)
    assert calls >= result["usage"]["llm_calls"]


def test_a_json_mode_run_against_smollm2(e2e_dispatcher):
    events, result = run(e2e_dispatcher, "json")
    assert_well_formed(events, result)
    assert result["mode"] == "json"
    parsed = [e for e in events if _is(e, "iteration", "start")]
    # JSON-mode tool calls get the engine's own ids; an unparseable reply was answered by
    # a reformat request (another turn) or taken as the final answer (the answer step).
    for e in parsed:
        assert e.data["tool_call_id"].startswith("json-")
    turns = [e for e in events if _is(e, "thinking", "done")]
    assert turns and all(isinstance(e.data["reasoning"], str) for e in turns)


def test_the_model_sees_the_tool_result_in_its_next_request(e2e_dispatcher, recorder):
    """The chat template drops ``tool`` messages; ``tool_results_as = "user"`` (the local
    registry's setting) puts the result where the model reads it."""
    query = "What is 17 * 23? Use the calculator tool."
    handle = e2e_dispatcher.submit(RunRequest(query=query, tools=["calculator"], mode="native",
                                              max_iterations=3, completion_check=False))
    events = [e for _, e in handle.events(timeout=240)]
    done = [e.data for e in events if _is(e, "iteration", "done") and not e.data["error"]]
    assert done, "SmolLM2 at temperature 0 calls the calculator for this question"
    observation = done[0]["observation"]
    sent = [r for r in recorder.requests if r.get("messages") and
            any(m.get("content") == query for m in r["messages"] if m["role"] == "user")]
    assert len(sent) >= 2
    second = sent[1]["messages"]
    assert any(m["role"] == "user" and observation in (m.get("content") or "")
               and m["content"].startswith("Result of the tool call calculator") for m in second), second
