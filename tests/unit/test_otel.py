"""Tracing middleware with the SDK's in-memory exporter (no workers): LLM and tool spans."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the `otel` extra")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from reactq.shared.observe import otel  # noqa: E402
from reactq.shared.llm import testing  # noqa: E402
from reactq.shared.models import ChatMessage  # noqa: E402

SECRET = "my card number is 4111"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.use_tracer(provider.get_tracer("test"))
    yield exporter
    otel.use_tracer(None)


def _msgs() -> list[ChatMessage]:
    return [ChatMessage(role="user", content=SECRET)]


async def test_a_chat_call_is_a_genai_span_without_content(spans, monkeypatch):
    monkeypatch.delenv(otel.CONTENT_ENV, raising=False)
    inner = testing.ScriptedLLM([testing.tool_calls(("c1", "slow", {"x": 1}),
                                                    usage={"prompt_tokens": 12, "completion_tokens": 5})],
                                name="general")
    await otel.TracedLLM(inner).chat(_msgs(), max_tokens=100)
    [span] = spans.get_finished_spans()
    a = dict(span.attributes)
    assert span.name == "chat general"
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == "general"
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (12, 5)
    assert tuple(a["gen_ai.response.finish_reasons"]) == ("tool_calls",)
    assert a["gen_ai.request.max_tokens"] == 100
    assert SECRET not in repr(a)


async def test_a_streamed_call_records_usage_and_finish_reason_and_content_only_when_enabled(spans, monkeypatch):
    monkeypatch.setenv(otel.CONTENT_ENV, "true")
    inner = testing.ScriptedLLM([testing.text("the answer", usage={"prompt_tokens": 3, "completion_tokens": 2})])
    chunks = [c async for c in otel.TracedLLM(inner).stream_chat(_msgs())]
    assert "".join(c.delta_content or "" for c in chunks) == "the answer"
    [span] = spans.get_finished_spans()
    a = dict(span.attributes)
    assert a["gen_ai.request.stream"] is True and tuple(a["gen_ai.response.finish_reasons"]) == ("stop",)
    assert a["gen_ai.usage.output_tokens"] == 2
    assert SECRET in a["gen_ai.input.messages"] and "the answer" in a["gen_ai.output.messages"]


def test_tool_spans_mark_errors_and_blocked_calls(spans):
    with otel.tool_span("charge_card", "call-9", "run-1") as span:
        otel.tool_outcome(span, "Tool call blocked by hook", blocked=True)
    [s] = spans.get_finished_spans()
    assert s.name == "execute_tool charge_card"
    assert s.attributes["gen_ai.tool.call.id"] == "call-9" and s.attributes["reactq.tool.blocked"] is True
    assert s.status.status_code.name == "ERROR"


def test_every_span_of_a_run_without_a_propagated_parent_shares_the_runs_trace_id(spans):
    run_id = "0123456789abcdef0123456789abcdef"
    t = otel.tracer()
    with t.start_as_current_span("a", context=otel.run_context(run_id)):
        pass
    with t.start_as_current_span("b", context=otel.run_context(run_id)):
        pass
    a, b = spans.get_finished_spans()
    assert a.context.trace_id == b.context.trace_id == int(run_id, 16)
    assert a.parent.span_id == b.parent.span_id
    assert otel.trace_id_of("not-hex") == otel.trace_id_of("not-hex") != 0


def test_without_an_endpoint_nothing_is_set_up(monkeypatch):
    monkeypatch.delenv(otel.ENDPOINT_ENV, raising=False)
    otel.use_tracer(None)
    monkeypatch.setattr(otel, "_configured", False)
    assert otel.tracer() is None
    with otel.tool_span("x", "c", "r") as span:
        assert span is None
