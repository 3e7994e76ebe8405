"""OpenTelemetry traces, when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (the ``otel`` extra).

Middleware only — nothing here changes what a run does:

* ``TracedLLM`` wraps a model like ``MeteredLLM`` does: one span per LLM call with the
  GenAI semantic-convention attributes (``gen_ai.operation.name``, ``gen_ai.provider.name``,
  ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` / ``output_tokens``,
  ``gen_ai.response.finish_reasons``). Message content is recorded only when
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` (the GenAI instrumentations'
  own switch): prompts and answers are user data.
* ``tool_span`` wraps one tool call (``execute_tool {name}``).
* ``run_context(run_id)`` is the parent of a step task that arrived without a propagated
  context: a remote span context whose trace id is derived from the run id. So every span
  of a run carries the same trace id even when it was enqueued by a process without
  tracing (the gateway, the lease watchdog). The Celery wiring (``reactq.workers.otel``)
  carries the real parent in the task headers whenever there is one.

Without the endpoint (or without the extra installed) every entry point is a cheap no-op.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

from reactq.shared.llm.base import DelegatingLLM
from reactq.shared.models import ChatMessage, LLMResult, StreamChunk
from reactq.shared.settings import OtelSettings

log = logging.getLogger(__name__)

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_lock = threading.Lock()
_tracer: Any = None
_configured = False


def enabled() -> bool:
    return tracer() is not None


def tracer() -> Any:
    """The process's tracer, set up on first use; None when tracing is off."""
    global _tracer, _configured
    if _configured:
        return _tracer
    with _lock:
        if _configured:
            return _tracer
        _configured = True
        if not _otel().endpoint:
            return None
        try:
            _tracer = _setup()
        except ImportError:
            log.warning("%s is set but the `otel` extra is not installed: no traces", ENDPOINT_ENV)
    return _tracer


def _setup() -> Any:
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES still apply (Resource.create reads them).
    resource = Resource.create({"service.name": _otel().service_name,
                                "process.pid": os.getpid()})
    provider = TracerProvider(resource=resource)
    # The exporter reads OTEL_EXPORTER_OTLP_ENDPOINT (+ /v1/traces) and its headers itself.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return trace.get_tracer("reactq")


def use_tracer(t: Any) -> None:
    """Tests: trace with this tracer (e.g. over an in-memory exporter); None turns it off."""
    global _tracer, _configured
    with _lock:
        _tracer, _configured = t, True


def flush() -> None:
    """Export what is buffered (a worker shutting down)."""
    try:
        from opentelemetry import trace

        provider = trace.get_tracer_provider()
        if hasattr(provider, "force_flush"):
            provider.force_flush(5000)
    except ImportError:
        pass


def trace_id_of(run_id: str) -> int:
    """The run's trace id: the run id itself when it is 32 hex digits (a uuid4 hex), else a hash."""
    try:
        if len(run_id) == 32:
            value = int(run_id, 16)
            if value:
                return value
    except ValueError:
        pass
    return int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:16], "big") or 1


def run_context(run_id: str) -> Any:
    """A context whose (remote, unexported) parent span belongs to the run's trace."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    span_id = int.from_bytes(hashlib.sha256(b"run:" + run_id.encode()).digest()[:8], "big") or 1
    parent = SpanContext(trace_id=trace_id_of(run_id), span_id=span_id, is_remote=True,
                         trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(parent))


def capture_content() -> bool:
    return _otel().capture_content


def _otel() -> OtelSettings:
    # Read when asked (tracing set up once; content capture per traced call), not cached:
    # tests and operators may change it while the process runs.
    return OtelSettings()


@contextmanager
def tool_span(name: str, call_id: str, run_id: str) -> Iterator[Any]:
    """``execute_tool {name}`` around one tool call; yields the span (or None when off)."""
    t = tracer()
    if t is None:
        yield None
        return
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
             "gen_ai.tool.call.id": call_id, "reactq.run_id": run_id}
    with t.start_as_current_span(f"execute_tool {name}", attributes=attrs) as span:
        yield span


def tool_outcome(span: Any, error: str | None, blocked: bool = False, uncertain: bool = False) -> None:
    """Mark a tool span with how the call ended (an error observation is not an exception)."""
    if span is None:
        return
    from opentelemetry.trace import Status, StatusCode

    if blocked:
        span.set_attribute("reactq.tool.blocked", True)
    if uncertain:
        span.set_attribute("reactq.tool.uncertain", True)
    if error is not None:
        span.set_attribute("error.type", "blocked" if blocked else "tool_error")
        span.set_status(Status(StatusCode.ERROR, error[:200]))


class TracedLLM(DelegatingLLM):
    """An ``LLM`` whose calls are spans (GenAI semantic conventions), then delegates."""

    def _attrs(self, kwargs: dict[str, Any], messages: list[ChatMessage]) -> dict[str, Any]:
        provider_model = getattr(self._inner, "model", None) or self.name
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
            "gen_ai.request.model": str(provider_model), "reactq.model": self.name,
        }
        if kwargs.get("max_tokens") is not None:
            attrs["gen_ai.request.max_tokens"] = kwargs["max_tokens"]
        if kwargs.get("temperature") is not None:
            attrs["gen_ai.request.temperature"] = kwargs["temperature"]
        if capture_content():
            attrs["gen_ai.input.messages"] = json.dumps(
                [m.model_dump(mode="json", exclude_none=True) for m in messages], ensure_ascii=False)
        return attrs

    @staticmethod
    def _usage(span: Any, usage: dict[str, Any] | None) -> None:
        if usage:
            if usage.get("prompt_tokens") is not None:
                span.set_attribute("gen_ai.usage.input_tokens", int(usage["prompt_tokens"]))
            if usage.get("completion_tokens") is not None:
                span.set_attribute("gen_ai.usage.output_tokens", int(usage["completion_tokens"]))

    async def chat(self, messages: list[ChatMessage], **kwargs: Any) -> LLMResult:
        t = tracer()
        if t is None:
            result: LLMResult = await self._inner.chat(messages, **kwargs)
            return result
        attrs = self._attrs(kwargs, messages)
        with t.start_as_current_span(f"chat {attrs['gen_ai.request.model']}", attributes=attrs) as span:
            result = await self._inner.chat(messages, **kwargs)
            self._usage(span, result.usage)
            # A non-streamed reply's finish reason, as the provider would state it.
            reason = "tool_calls" if result.message.tool_calls else "stop"
            span.set_attribute("gen_ai.response.finish_reasons", [reason])
            if capture_content():
                span.set_attribute("gen_ai.output.messages", result.message.model_dump_json(exclude_none=True))
            return result

    def stream_chat(self, messages: list[ChatMessage], **kwargs: Any) -> AsyncIterator[StreamChunk]:
        t = tracer()
        inner: AsyncIterator[StreamChunk] = self._inner.stream_chat(messages, **kwargs)
        if t is None:
            return inner
        return self._traced(t, inner, self._attrs(kwargs, messages))

    async def _traced(self, t: Any, inner: AsyncIterator[StreamChunk], attrs: dict[str, Any]) -> AsyncIterator[StreamChunk]:
        # Not "as current": an async generator may be finished in another context, and the
        # span has no children anyway.
        span = t.start_span(f"chat {attrs['gen_ai.request.model']}",
                            attributes={**attrs, "gen_ai.request.stream": True})
        reasons: list[str] = []
        text: list[str] = []
        try:
            async for chunk in inner:
                self._usage(span, chunk.usage)
                if chunk.finish_reason:
                    reasons.append(chunk.finish_reason)
                if chunk.delta_content and capture_content():
                    text.append(chunk.delta_content)
                yield chunk
        except Exception as exc:
            span.record_exception(exc)
            span.set_attribute("error.type", type(exc).__name__)
            raise
        finally:
            if reasons:
                span.set_attribute("gen_ai.response.finish_reasons", reasons)
            if text:
                span.set_attribute("gen_ai.output.messages", json.dumps(
                    [{"role": "assistant", "content": "".join(text)}], ensure_ascii=False))
            span.end()


__all__ = ["TracedLLM", "enabled", "flush", "run_context", "tool_outcome", "tool_span",
           "trace_id_of", "tracer", "use_tracer"]
