"""The in-process runner with the real openai client over HTTP (scripted server):
full event sequences in both modes, retries, streams without usage, a truncated stream,
and reasoning_content — issue 2's client-facing behaviour end to end."""

from __future__ import annotations

import json

import pytest

from reactq.shared.engine.deps import EngineDeps
from reactq.shared.events import ListSink
from reactq.shared.inprocess import run_local
from reactq.shared.llm.openai import OpenAILLM
from reactq.shared.requests import RunRequest
from reactq.shared.tools.builtins import builtin_registry
from tests.integration.conftest import ScriptBook
from tests.scripted_server import ScriptedServer, reply_error, reply_text, reply_tool_calls

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server():
    book = ScriptBook()
    srv = ScriptedServer(book).start()
    yield srv, book
    srv.stop()


def _deps(srv: ScriptedServer, **abilities: bool) -> EngineDeps:
    llm = OpenAILLM("scripted", base_url=srv.base_url, api_key="k",
                    abilities={"tool_call": True, "json_mode": True, **abilities})
    return EngineDeps(llm=llm, registry=builtin_registry(demo=True))


def _shape(sink: ListSink) -> list[tuple]:
    return [(e.channel, e.data.get("type"), e.data.get("status")) for e in sink.events]


ONE_TOOL_SEQUENCE = [
    ("step", "thinking", "start"), ("step", "thinking", "done"),
    ("step", "iteration", "start"), ("step", "iteration", "done"),
    ("step", "thinking", "start"), ("step", "thinking", "done"),
    ("step", "answer", "start"), ("answer", None, "start"),
]


async def test_a_native_run_over_http_has_the_seed_event_sequence(server):
    """S77 over the real client: native tool call, then the streamed answer."""
    srv, book = server
    q = book.script("native http 17*23", [
        reply_tool_calls([("c1", "calculator", {"expression": "17*23"})], reasoning_content="multiply"),
        reply_text("391"),
    ], synthesis=reply_text("17 × 23 = 391", chunk_chars=4))
    sink = ListSink()
    state = await run_local(RunRequest(query=q), _deps(srv), sink=sink)
    assert state.status == "succeeded" and state.final_answer == "17 × 23 = 391"
    shape = _shape(sink)
    assert shape[:8] == ONE_TOOL_SEQUENCE
    assert shape[-2:] == [("answer", None, "done"), ("done", None, "succeeded")]
    assert sink.events[1].data["reasoning"] == "multiply"
    assert sink.events[3].data["observation"] == "391"
    # reasoning_content is sent back on the assistant message that made the tool call.
    second = [b for b in srv.bodies if b["messages"][1]["content"] == q][1]
    assistant = next(m for m in second["messages"] if m["role"] == "assistant")
    assert assistant.get("reasoning_content") == "multiply"
    # Two loop turns and the streamed synthesis: everything the run was billed for.
    assert state.usage.llm_calls == 3 and state.usage.total_tokens > 0


async def test_a_json_mode_run_over_http_sends_response_format_and_parses_actions(server):
    """S7/S8 over the real client."""
    srv, book = server
    q = book.script("json http add", [
        reply_text(json.dumps({"type": "tool_call", "reasoning": "add", "tool_name": "add",
                               "tool_args": {"a": 1, "b": 2}})),
        reply_text("```json\n" + json.dumps({"type": "final_answer", "reasoning": "", "answer": "3"}) + "\n```"),
    ])
    sink = ListSink()
    state = await run_local(RunRequest(query=q, mode="json"), _deps(srv), sink=sink)
    assert state.status == "succeeded" and state.answer == "3"
    assert _shape(sink)[:8] == ONE_TOOL_SEQUENCE
    loop_bodies = [b for b in srv.bodies if not b.get("stream") and b["messages"][1]["content"] == q]
    assert all(b["response_format"] == {"type": "json_object"} for b in loop_bodies)
    assert all("tools" not in b for b in loop_bodies)


async def test_retryable_errors_are_retried_and_the_run_goes_on(server):
    """Issue 2: 429 then 500 then success within one turn; the run succeeds."""
    srv, _ = server
    from tests.scripted_server import SequenceHandler

    handler = SequenceHandler([
        reply_error(429, retry_after=0.01), reply_error(500, retry_after=0.01), reply_text("fine"),
        reply_text("streamed fine"),
    ])
    retry_srv = ScriptedServer(handler).start()
    try:
        state = await run_local(RunRequest(query="retry please"), _deps(retry_srv), sink=ListSink())
    finally:
        retry_srv.stop()
    assert state.status == "succeeded" and state.final_answer == "streamed fine"
    assert handler.calls == 4


async def test_a_non_retryable_error_fails_the_run_with_a_done_event(server):
    """S64/invariant 5: 400 is not retried; error then done, status failed."""
    srv, book = server
    q = book.script("bad request run", [reply_error(400, {"error": {"message": "nope"}})])
    sink = ListSink()
    state = await run_local(RunRequest(query=q), _deps(srv), sink=sink)
    assert state.status == "failed"
    assert [e.channel for e in sink.events][-2:] == ["error", "done"]
    assert sink.events[-1].data["answer"].startswith("Agent error: LLMError")
    assert len([b for b in srv.bodies if b["messages"][1]["content"] == q]) == 1


async def test_a_truncated_synthesis_stream_falls_back_to_the_loop_answer(server):
    """S52 over HTTP: a stream that stops without [DONE] is a failure, not a short answer."""
    srv, book = server
    q = book.script("truncated stream", [reply_text("the loop answer")],
                    synthesis=reply_text("partial text that never fin", truncate_stream=True))
    sink = ListSink()
    state = await run_local(RunRequest(query=q), _deps(srv), sink=sink)
    assert state.status == "succeeded"
    assert state.final_answer == "the loop answer"
    assert any(e.channel == "error" and e.data["kind"] == "synthesis_fallback" for e in sink.events)


async def test_a_stream_without_usage_still_finishes(server):
    srv, book = server
    q = book.script("no usage stream", [reply_text("x")],
                    synthesis=reply_text("answer without usage", include_usage=False))
    state = await run_local(RunRequest(query=q), _deps(srv), sink=ListSink())
    assert state.final_answer == "answer without usage"
