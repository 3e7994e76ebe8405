"""The Celery side of tracing (``reactq.shared.observe.otel``): a span per step task, its context
carried in the task headers (W3C ``traceparent``), as signal handlers around every task.

* ``before_task_publish``: the publishing task's span goes into the message headers.
* ``task_prerun``: the task's span starts as a child of the context in its headers, or,
  when there is none (enqueued by the gateway or the lease watchdog), of the run's own
  context (``shared.otel.run_context``: one trace id per run, across every worker).
* ``task_postrun`` / ``task_failure``: the span ends (with the exception, if any).

Why not ``opentelemetry-instrumentation-celery``: its first task of a run would start a
new trace whenever the enqueuer is not traced, and a run is enqueued again by whichever
worker notices an expired lease; deriving the trace from the run id keeps one trace per run.
Everything here is a no-op unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set.
"""

from __future__ import annotations

import threading
from typing import Any, cast

from celery import signals

from reactq.shared.observe import otel

_open: dict[str, tuple[Any, Any]] = {}  # task id → (span, context token)
_lock = threading.Lock()


class _RequestGetter:
    """Reads propagation fields from a Celery task request (headers become attributes)."""

    def get(self, carrier: Any, key: str) -> list[str] | None:
        value = getattr(carrier, key, None)
        if value is None and hasattr(carrier, "get"):
            value = carrier.get(key)
        if value is None:
            return None
        return list(value) if isinstance(value, (list, tuple)) else [str(value)]

    def keys(self, carrier: Any) -> list[str]:
        return []


@signals.before_task_publish.connect
def _inject(headers: dict[str, Any] | None = None, **_: Any) -> None:
    if headers is None or otel.tracer() is None:
        return
    from opentelemetry.propagate import inject

    inject(headers)


@signals.task_prerun.connect
def _start(task_id: str | None = None, task: Any = None, args: Any = None, **_: Any) -> None:
    t = otel.tracer()
    if t is None or task is None or task_id is None:
        return
    from opentelemetry import context, trace
    from opentelemetry.propagate import extract

    run_id = str(args[0]) if args else ""
    ctx = extract(task.request, getter=cast(Any, _RequestGetter()))
    if not trace.get_current_span(ctx).get_span_context().is_valid and run_id:
        ctx = otel.run_context(run_id)
    attrs: dict[str, Any] = {"celery.task.name": task.name, "celery.task.id": task_id,
                             "reactq.run_id": run_id}
    if args and len(args) > 1 and args[1] is not None:
        attrs["reactq.step_no"] = str(args[1])
    span = t.start_span(task.name, context=ctx, kind=trace.SpanKind.CONSUMER, attributes=attrs)
    token = context.attach(trace.set_span_in_context(span, ctx))
    with _lock:
        _open[task_id] = (span, token)


@signals.task_failure.connect
def _failed(task_id: str | None = None, exception: BaseException | None = None, **_: Any) -> None:
    with _lock:
        entry = _open.get(task_id or "")
    if entry is not None and exception is not None:
        from opentelemetry.trace import Status, StatusCode

        entry[0].record_exception(exception)
        entry[0].set_status(Status(StatusCode.ERROR, str(exception)[:200]))


@signals.task_postrun.connect
def _end(task_id: str | None = None, **_: Any) -> None:
    with _lock:
        entry = _open.pop(task_id or "", None)
    if entry is None:
        return
    from opentelemetry import context

    span, token = entry
    span.end()
    context.detach(token)


def traced_registry(registry: Any) -> Any:
    """``registry`` with every model wrapped in ``TracedLLM`` (unchanged when tracing is off)."""
    if otel.tracer() is None:
        return registry
    from reactq.shared.llm.registry import ModelRegistry

    out = ModelRegistry()
    for name in registry.list_models():
        out.register(name, otel.TracedLLM(registry.get(name)), registry.roles_of(name),
                     spec=registry.spec_of(name))
    return out


@signals.worker_shutdown.connect
def _flush(**_: Any) -> None:
    otel.flush()
