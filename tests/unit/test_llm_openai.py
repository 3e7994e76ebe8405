"""OpenAILLM over real HTTP (the real openai 3.x client) against tests/scripted_server.py."""

from __future__ import annotations

import asyncio
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from reactq.shared.errors import ConfigError, LLMError, StreamIncomplete
from reactq.shared.llm import base as llm_base
from reactq.shared.llm.base import LLM
from reactq.shared.llm.assembly import ToolCallAssembler
from reactq.shared.llm.base import is_loopback_url
from reactq.shared.llm.messages import to_openai_message
from reactq.shared.llm.openai import OpenAILLM
from reactq.shared.models import ChatMessage, StreamChunk, ToolCallRequest
from tests.scripted_server import (
    DEFAULT_SYNTHESIS_TEXT,
    Reply,
    Script,
    ScriptedServer,
    SequenceHandler,
    conversation_script,
    reply_error,
    reply_text,
    reply_tool_calls,
)

ROOT = Path(__file__).resolve().parents[2]

#: Used by the CLI test (`python -m tests.scripted_server --script ...:CLI_SCRIPTS`).
CLI_SCRIPTS = {"*": [reply_text("from the subprocess")]}


@pytest.fixture(autouse=True)
def _no_real_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llm_base, "ALLOW_REAL_LLM", False)


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(SequenceHandler([])) as srv:
        yield srv


@pytest.fixture
def srv(server: ScriptedServer) -> ScriptedServer:
    server.clear()
    server.handler = SequenceHandler([])
    return server


def make_llm(srv: ScriptedServer, **kw: Any) -> OpenAILLM:
    kw.setdefault("abilities", {"tool_call": True, "json_mode": True})
    return OpenAILLM("scripted-model", base_url=srv.base_url, api_key="sk-test-secret", **kw)


def user(text: str) -> list[ChatMessage]:
    return [ChatMessage(role="system", content="be brief"), ChatMessage(role="user", content=text)]


async def collect(it: Any) -> list[StreamChunk]:
    return [c async for c in it]


TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]


# --------------------------------------------------------------------------- chat()


async def test_plain_reply_and_no_none_params(srv: ScriptedServer) -> None:
    srv.handler = SequenceHandler([reply_text("hello", usage={
        "prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9,
        "prompt_tokens_details": {"cached_tokens": 3}})])
    llm = make_llm(srv)
    assert isinstance(llm, LLM)
    result = await llm.chat(user("hi"))
    assert result.message.role == "assistant"
    assert result.message.content == "hello"
    assert result.message.tool_calls is None
    assert result.usage == {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9,
                            "cache_read_input_tokens": 3}
    (body,) = srv.bodies
    assert body["model"] == "scripted-model"
    assert set(body) == {"model", "messages"}  # nothing that was None is sent
    assert body["messages"] == [{"role": "system", "content": "be brief"},
                                {"role": "user", "content": "hi"}]
    assert srv.requests[0].headers["authorization"] == "Bearer sk-test-secret"


async def test_params_passed_when_set(srv: ScriptedServer) -> None:
    srv.handler = SequenceHandler([reply_text("x")])
    llm = make_llm(srv, max_tokens=100, extra_headers={"x-team": "qa"})
    await llm.chat(user("hi"), tools=TOOLS, tool_choice="auto", temperature=0.0,
                   reasoning_effort="low")
    (rec,) = srv.requests
    assert rec.body["tools"] == TOOLS
    assert rec.body["tool_choice"] == "auto"
    assert rec.body["temperature"] == 0.0
    assert rec.body["max_tokens"] == 100  # constructor default
    assert rec.body["reasoning_effort"] == "low"
    assert rec.headers["x-team"] == "qa"


async def test_usage_missing_is_empty_dict(srv: ScriptedServer) -> None:
    srv.handler = SequenceHandler([reply_text("x", include_usage=False)])
    result = await make_llm(srv).chat(user("hi"))
    assert result.usage == {}


async def test_native_tool_calls_parsed_and_invalid_args_raw(srv: ScriptedServer) -> None:
    srv.handler = SequenceHandler([reply_tool_calls([
        ("call_a", "weather", {"city": "Paris", "days": 2}),
        ("call_b", "clock", '{"tz": "CET"'),  # truncated JSON
        ("call_c", "noargs", ""),
    ])])
    result = await make_llm(srv).chat(user("weather?"), tools=TOOLS)
    calls = result.message.tool_calls
    assert calls == [
        ToolCallRequest(id="call_a", name="weather", arguments={"city": "Paris", "days": 2}),
        ToolCallRequest(id="call_b", name="clock", arguments={"_raw": '{"tz": "CET"'}),
        ToolCallRequest(id="call_c", name="noargs", arguments={}),
    ]


async def test_json_mode_response_format_passed_through(srv: ScriptedServer) -> None:
    srv.handler = SequenceHandler([reply_text('{"type": "final_answer", "answer": "4"}')])
    fmt = {"type": "json_object"}
    result = await make_llm(srv).chat(user("2+2"), response_format=fmt)
    assert result.message.content == '{"type": "final_answer", "answer": "4"}'
    assert srv.bodies[0]["response_format"] == fmt


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_retryable_error_then_success(srv: ScriptedServer, status: int) -> None:
    srv.handler = SequenceHandler([reply_error(status, retry_after=0.01), reply_text("ok")])
    result = await make_llm(srv).chat(user("hi"))
    assert result.message.content == "ok"
    assert len(srv.requests) == 2


async def test_retries_exhausted_raise_llm_error(srv: ScriptedServer) -> None:
    srv.handler = SequenceHandler([reply_error(500, retry_after=0.01)], repeat_last=True)
    with pytest.raises(LLMError, match=r"'scripted-model'.*HTTP 500") as info:
        await make_llm(srv, max_retries=2).chat(user("hi"))
    assert len(srv.requests) == 3  # first try + 2 retries
    assert isinstance(info.value.__cause__, openai.InternalServerError)
    assert info.value.status_code == 500  # type: ignore[attr-defined]
    again = pickle.loads(pickle.dumps(info.value))  # Celery stores exceptions
    assert str(again) == str(info.value) and again.status_code == 500


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_other_4xx_not_retried(srv: ScriptedServer, status: int) -> None:
    srv.handler = SequenceHandler([reply_error(status, {"error": {"message": "bad thing"}}),
                                   reply_text("never")])
    with pytest.raises(LLMError, match=rf"HTTP {status}.*bad thing"):
        await make_llm(srv).chat(user("hi"))
    assert len(srv.requests) == 1


async def test_connection_error_wrapped() -> None:
    # A port that nothing listens on: bind, read the port, close.
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    llm = OpenAILLM("m", base_url=f"http://127.0.0.1:{port}/v1", abilities={}, max_retries=0)
    with pytest.raises(LLMError, match="connection failed") as info:
        await llm.chat(user("hi"))
    assert isinstance(info.value.__cause__, openai.APIConnectionError)
    assert info.value.status_code is None  # type: ignore[attr-defined]


async def test_timeout_wrapped(srv: ScriptedServer) -> None:
    srv.handler = SequenceHandler([reply_text("slow", delay=1.0)])
    llm = make_llm(srv, timeout=0.2, max_retries=0)
    with pytest.raises(LLMError, match="timed out") as info:
        await llm.chat(user("hi"))
    assert isinstance(info.value.__cause__, openai.APITimeoutError)


async def test_reasoning_content_read_and_sent_back(srv: ScriptedServer) -> None:
    srv.handler = SequenceHandler([
        reply_tool_calls([("call_1", "weather", {"city": "NYC"})], reasoning_content="I should look"),
        reply_text("sunny", reasoning_content="done thinking"),
    ])
    llm = make_llm(srv)
    messages = user("weather in NYC?")
    first = await llm.chat(messages, tools=TOOLS)
    assert first.message.reasoning_content == "I should look"
    messages.append(first.message)
    messages.append(ChatMessage(role="tool", tool_call_id="call_1", name="weather",
                                content="sunny, 20C", pinned=True))
    second = await llm.chat(messages, tools=TOOLS)
    assert second.message.reasoning_content == "done thinking"
    sent = srv.bodies[1]["messages"]
    assert sent[2] == {"role": "assistant", "content": "", "reasoning_content": "I should look",
                       "tool_calls": [{"id": "call_1", "type": "function",
                                       "function": {"name": "weather",
                                                    "arguments": '{"city": "NYC"}'}}]}
    assert sent[3] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 20C"}
    assert all("pinned" not in m for m in sent)


def test_message_mapping() -> None:
    vision: list[dict[str, Any]] = [{"type": "text", "text": "what is this"},
              {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    assert to_openai_message(ChatMessage(role="user", content=vision, pinned=True)) == {
        "role": "user", "content": vision}
    raw = ChatMessage(role="assistant", content=None,
                      tool_calls=[ToolCallRequest(id="c", name="t", arguments={"_raw": "{oops"})])
    # unparseable arguments go back to the model exactly as it wrote them
    assert to_openai_message(raw)["tool_calls"][0]["function"]["arguments"] == "{oops"
    assert to_openai_message(ChatMessage(role="user", content="x", name="alice")) == {
        "role": "user", "content": "x", "name": "alice"}
    assert to_openai_message(ChatMessage(role="assistant", content=None)) == {
        "role": "assistant", "content": ""}


# --------------------------------------------------------------------------- stream_chat()


async def test_stream_text_with_usage(srv: ScriptedServer) -> None:
    srv.handler = SequenceHandler([reply_text("The answer is forty-two.", usage={
        "prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11})])
    chunks = await collect(make_llm(srv).stream_chat(user("q")))
    deltas = [c.delta_content for c in chunks if c.delta_content]
    assert len(deltas) > 1
    assert "".join(deltas) == "The answer is forty-two."
    last = chunks[-1]
    assert last.finish_reason == "stop" and last.tool_calls is None
    assert last.usage == {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}
    assert [c for c in chunks if c.finish_reason] == [last]
    body = srv.bodies[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


async def test_stream_without_usage(srv: ScriptedServer) -> None:
    srv.handler = SequenceHandler([reply_text("no usage here", include_usage=False)])
    chunks = await collect(make_llm(srv).stream_chat(user("q")))
    assert chunks[-1].finish_reason == "stop"
    assert chunks[-1].usage is None


async def test_truncated_stream_raises(srv: ScriptedServer) -> None:
    srv.handler = SequenceHandler([reply_text("cut off in the mid", truncate_stream=True)])
    got: list[StreamChunk] = []
    with pytest.raises(StreamIncomplete, match="without a finish_reason"):
        async for c in make_llm(srv).stream_chat(user("q")):
            got.append(c)
    assert "".join(c.delta_content or "" for c in got) == "cut off in the mid"
    assert issubclass(StreamIncomplete, LLMError)


async def test_stream_error_status_wrapped(srv: ScriptedServer) -> None:
    srv.handler = SequenceHandler([reply_error(503, retry_after=0.01), reply_text("ok")])
    chunks = await collect(make_llm(srv).stream_chat(user("q")))
    assert "".join(c.delta_content or "" for c in chunks) == "ok"
    srv.handler = SequenceHandler([reply_error(400)])
    with pytest.raises(LLMError, match="HTTP 400"):
        await collect(make_llm(srv).stream_chat(user("q")))


async def test_stream_reasoning(srv: ScriptedServer) -> None:
    srv.handler = SequenceHandler([reply_text("42", reasoning_content="six times seven")])
    chunks = await collect(make_llm(srv).stream_chat(user("q")))
    assert "".join(c.delta_reasoning or "" for c in chunks) == "six times seven"
    assert "".join(c.delta_content or "" for c in chunks) == "42"
    # reasoning arrives before content
    first_content = next(i for i, c in enumerate(chunks) if c.delta_content)
    assert all(c.delta_reasoning is None for c in chunks[first_content:])


async def test_stream_tool_calls_openai_style(srv: ScriptedServer) -> None:
    srv.handler = SequenceHandler([reply_tool_calls([
        ("call_1", "weather", {"city": "New York City", "unit": "celsius"}),
        ("call_2", "clock", {"tz": "America/New_York"}),
        ("call_3", "broken", '{"a": '),
    ], chunk_chars=5)])
    chunks = await collect(make_llm(srv).stream_chat(user("q"), tools=TOOLS))
    last = chunks[-1]
    assert last.finish_reason == "tool_calls"
    assert last.tool_calls == [
        ToolCallRequest(id="call_1", name="weather",
                        arguments={"city": "New York City", "unit": "celsius"}),
        ToolCallRequest(id="call_2", name="clock", arguments={"tz": "America/New_York"}),
        ToolCallRequest(id="call_3", name="broken", arguments={"_raw": '{"a": '}),
    ]
    assert srv.bodies[0]["tools"] == TOOLS


async def test_stream_llama_cpp_repeated_id_and_name(srv: ScriptedServer) -> None:
    srv.handler = SequenceHandler([reply_tool_calls(
        [("call_abc", "weather", {"city": "San Francisco", "days": 3})],
        repeat_tool_ids_in_chunks=True, chunk_chars=4, include_usage=False)])
    chunks = await collect(make_llm(srv).stream_chat(user("q"), tools=TOOLS))
    assert chunks[-1].tool_calls == [ToolCallRequest(
        id="call_abc", name="weather", arguments={"city": "San Francisco", "days": 3})]
    assert chunks[-1].usage is None


async def test_stream_two_calls_on_index_zero(srv: ScriptedServer) -> None:
    srv.handler = SequenceHandler([reply_tool_calls(
        [("call_1", "weather", {"city": "NYC"}), ("call_2", "weather", {"tz": "EST"})],
        reuse_index_zero=True, chunk_chars=3)])
    chunks = await collect(make_llm(srv).stream_chat(user("q"), tools=TOOLS))
    calls = chunks[-1].tool_calls
    assert calls is not None
    assert [(c.id, c.arguments) for c in calls] == [("call_1", {"city": "NYC"}),
                                                   ("call_2", {"tz": "EST"})]


async def test_stream_two_calls_on_index_zero_llama_style(srv: ScriptedServer) -> None:
    srv.handler = SequenceHandler([reply_tool_calls(
        [("call_1", "weather", {"city": "NYC"}), ("call_2", "clock", {"tz": "EST"})],
        reuse_index_zero=True, repeat_tool_ids_in_chunks=True, chunk_chars=3)])
    chunks = await collect(make_llm(srv).stream_chat(user("q"), tools=TOOLS))
    assert chunks[-1].tool_calls == [
        ToolCallRequest(id="call_1", name="weather", arguments={"city": "NYC"}),
        ToolCallRequest(id="call_2", name="clock", arguments={"tz": "EST"})]


def test_assembler_rules() -> None:
    a = ToolCallAssembler()
    a.add(1, "id_b", "second", '{"b":')
    a.add(0, "id_a", "first", "")
    a.add(1, None, None, " 2}")
    a.add(0, None, None, '{"a": 1}')
    a.add(0, None, "other", "{}")  # new name, no id, on a used index ⇒ new call
    a.add(None, None, None, "")  # no index ⇒ index 0, argument-only, nothing to add
    calls = a.result()
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("id_a", "first", {"a": 1}), ("call_1", "other", {}), ("id_b", "second", {"b": 2})]
    assert ToolCallAssembler().result() == []


# --------------------------------------------------------------------------- guards, lifecycle


async def test_real_llm_refused_when_disabled(srv: ScriptedServer) -> None:
    llm = OpenAILLM("gpt-4o-mini", base_url="https://api.openai.com/v1", api_key="sk-x",
                    abilities={})
    with pytest.raises(ConfigError, match="ALLOW_REAL_LLM"):
        await llm.chat(user("hi"))
    with pytest.raises(ConfigError, match="ALLOW_REAL_LLM"):
        llm.stream_chat(user("hi"))  # refused at call time, before iteration
    with pytest.raises(ConfigError):
        await OpenAILLM("m", base_url=None, abilities={}).chat(user("hi"))
    assert is_loopback_url("http://localhost:8080/v1")
    assert is_loopback_url("http://127.0.0.2:8080/v1")
    assert is_loopback_url("http://[::1]:8080/v1")
    assert not is_loopback_url("http://10.0.0.1/v1")
    assert not is_loopback_url("http://localhost.evil.com/v1")
    assert not is_loopback_url(None)


def test_repr_hides_key() -> None:
    llm = OpenAILLM("m", base_url="http://127.0.0.1:9/v1", api_key="sk-very-secret-123",
                    abilities={"tool_call": True})
    assert "sk-very-secret-123" not in repr(llm)
    assert "sk-very-secret-123" not in str(llm)
    assert "sk-very-secret-123" not in repr(vars(llm))
    assert llm.name == "m" and llm.context_size is None


def test_usable_from_several_event_loops(server: ScriptedServer) -> None:
    # Celery steps may each call asyncio.run(); a client bound to a closed loop must not be reused.
    server.clear()
    server.handler = SequenceHandler([reply_text("one"), reply_text("two")])
    llm = make_llm(server)
    assert asyncio.run(llm.chat(user("a"))).message.content == "one"
    assert asyncio.run(llm.chat(user("b"))).message.content == "two"


# --------------------------------------------------------------------------- the scripted server


async def test_conversation_script_is_stateless(srv: ScriptedServer) -> None:
    srv.handler = conversation_script({
        "capital of France": Script(
            turns=[reply_tool_calls([("c1", "search", {"q": "France capital"})]),
                   reply_text('{"type": "final_answer", "answer": "Paris"}')],
            synthesis=reply_text("Paris is the capital.")),
        "*": [reply_text("fallback")],
    })
    llm = make_llm(srv)
    q = [ChatMessage(role="user", content="What is the capital of France?")]
    first = await llm.chat(q)
    again = await llm.chat(q)  # a redelivered call gets the same reply
    assert first.message.tool_calls == again.message.tool_calls
    assert first.message.tool_calls and first.message.tool_calls[0].name == "search"
    q2 = q + [first.message, ChatMessage(role="tool", tool_call_id="c1", content="Paris")]
    second = await llm.chat(q2)
    assert "Paris" in (second.message.content or "")
    third = await llm.chat(q2 + [second.message, ChatMessage(role="user", content="more")])
    assert third.message.content == second.message.content  # clamped to the last turn
    streamed = await collect(llm.stream_chat(q2))
    assert "".join(c.delta_content or "" for c in streamed) == "Paris is the capital."
    other = await llm.chat([ChatMessage(role="user", content="unrelated")])
    assert other.message.content == "fallback"
    default_synth = await collect(llm.stream_chat([ChatMessage(role="user", content="zzz")]))
    assert "".join(c.delta_content or "" for c in default_synth) == DEFAULT_SYNTHESIS_TEXT


async def test_conversation_script_no_match_is_400(srv: ScriptedServer) -> None:
    srv.handler = conversation_script({"only this": [reply_text("x")]})
    with pytest.raises(LLMError, match="HTTP 400.*no script"):
        await make_llm(srv).chat(user("something else"))
    assert len(srv.requests) == 1


async def test_handler_exception_is_500_not_retried(srv: ScriptedServer) -> None:
    def boom(request: dict[str, Any]) -> Reply:
        raise RuntimeError("test bug")

    srv.handler = boom
    with pytest.raises(LLMError, match="HTTP 500"):
        await make_llm(srv).chat(user("x"))
    assert len(srv.requests) == 1
    assert isinstance(srv.errors[0], RuntimeError)


async def test_many_slow_requests_held_at_once(srv: ScriptedServer) -> None:
    # No wall-clock assertion (machines are noisy): overlap is read from the request log.
    n = 50
    srv.handler = conversation_script({"*": [reply_text("ok", delay=1.0)]})
    llm = make_llm(srv)
    results = await asyncio.gather(*(llm.chat(user(f"q{i}")) for i in range(n)))
    assert all(r.message.content == "ok" for r in results)
    recs = srv.requests
    assert len(recs) == n
    assert all(r.answered_at is not None and r.answered_at - r.received_at >= 0.99 for r in recs)
    # The delay is an asyncio.sleep: many requests are held by the server at the same moment.
    edges = sorted([(r.received_at, 1) for r in recs] + [(r.answered_at or 0.0, -1) for r in recs])
    held = peak = 0
    for _, step in edges:
        held += step
        peak = max(peak, held)
    assert peak >= n // 2, peak


async def test_models_endpoint(srv: ScriptedServer) -> None:
    client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
    try:
        models = await client.models.list()
        assert [m.id for m in models.data] == ["scripted"]
    finally:
        await client.close()


def test_cli_subprocess() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.scripted_server", "--port", "0",
         "--script", "tests.unit.test_llm_openai:CLI_SCRIPTS"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("listening on http://127.0.0.1:"), line
        base_url = line.removeprefix("listening on ")
        llm = OpenAILLM("m", base_url=base_url, abilities={}, max_retries=3)
        result = asyncio.run(llm.chat(user("anything")))
        assert result.message.content == "from the subprocess"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_a_reply_is_read_from_its_json_whatever_its_content_type(srv: ScriptedServer) -> None:
    """The reply is read once from its JSON, not first into the SDK's models: a completion a
    gateway labels text/plain still reads; JSON that is not a completion names what it got."""
    completion = ('{"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": '
                  '{"role": "assistant", "content": null, "reasoning": "hm", "tool_calls": [{"id": "c1", '
                  '"type": "function", "function": {"name": "weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}}]}, '
                  '"finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 5, "completion_tokens": 2, '
                  '"total_tokens": 7, "prompt_tokens_details": {"cached_tokens": 3}}}')
    srv.handler = SequenceHandler([
        Reply(raw_body=completion, raw_content_type="text/plain"),
        Reply(raw_body='{"result": "ok"}', raw_content_type="application/json"),
        Reply(raw_body='{"choices": []}', raw_content_type="application/json"),
    ])
    llm = make_llm(srv)
    got = await llm.chat(user("weather?"), tools=TOOLS)
    assert got.message.tool_calls == [ToolCallRequest(id="c1", name="weather", arguments={"city": "Oslo"})]
    assert got.message.reasoning_content == "hm" and got.message.content is None
    assert got.usage == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7,
                         "cache_read_input_tokens": 3}
    with pytest.raises(LLMError, match="not a chat completion .a JSON object with result"):
        await llm.chat(user("again"))
    with pytest.raises(LLMError, match="returned no choices"):
        await llm.chat(user("and again"))
