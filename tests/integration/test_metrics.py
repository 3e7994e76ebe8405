"""Issue 6: Prometheus metrics from real workers, read back through ``reactq.dispatcher.http.metrics``."""

from __future__ import annotations

import importlib
import json
import re
from typing import Any

import pytest
import redis

from reactq.shared.keys import Keys
from reactq.dispatcher.http.metrics import FAMILIES as READER_FAMILIES
from reactq.dispatcher.http.metrics import counter_family, histogram_family, render, snapshot
from reactq.shared.requests import RunRequest
from reactq.shared.settings import Settings
from tests.scripted_server import reply_error, reply_text, reply_tool_calls
from tests.metrics_kit import settled

pytestmark = pytest.mark.integration


def _value(snap: dict[str, Any], name: str, **labels: str) -> float:
    """The sample ``name`` with exactly these labels (0 when absent)."""
    return float(snap.get(name, {}).get(tuple(sorted(labels.items())), 0.0))


def _sum(snap: dict[str, Any], name: str, **labels: str) -> float:
    """The sum over every sample ``name`` whose labels include these."""
    return sum(v for k, v in snap.get(name, {}).items() if set(labels.items()) <= set(k))


def _settled(settings: Settings, ready: Any) -> dict[str, Any]:
    """A snapshot once ``ready(snapshot)`` (the workers' summed counters are in)."""
    return settled(lambda: snapshot(settings), ready)


@pytest.mark.core
def test_a_run_on_the_workers_is_counted(workers, dispatcher, llm, settings, r):
    before = snapshot(settings)
    q = llm.script(llm.unique("metrics: what is 6*7?"), [
        reply_tool_calls([("c1", "calculator", {"expression": "6*7"})]),
        reply_text("42"),
    ], synthesis=reply_text("It is 42."))
    handle = dispatcher.submit(RunRequest(query=q, mode="native"))
    assert handle.result(timeout=30)["status"] == "succeeded"

    def calls(snap: dict[str, Any]) -> float:
        return _value(snap, "reactq_llm_call_seconds_count", model="scripted")

    def turns(snap: dict[str, Any]) -> float:
        return _value(snap, "reactq_turn_seconds_count", model="scripted", mode="native")

    def tool_times(snap: dict[str, Any]) -> float:
        return _value(snap, "reactq_tool_call_seconds_count", tool="calculator")

    after = _settled(settings, lambda snap: calls(snap) - calls(before) >= 3 and turns(snap) - turns(before) >= 2
                     and tool_times(snap) > tool_times(before))

    def delta(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert delta("reactq_runs_started_total", mode="native") >= 1
    assert delta("reactq_runs_ended_total", status="succeeded", mode="native") >= 1
    # Two loop turns and the streamed synthesis, all timed for the model "scripted".
    assert delta("reactq_llm_call_seconds_count", model="scripted") >= 3
    assert delta("reactq_llm_tokens_total", model="scripted", kind="prompt") > 0
    assert delta("reactq_tool_call_seconds_count", tool="calculator") >= 1
    # A turn with a tool call (LLM → tool → fan-in) and one without.
    assert delta("reactq_turn_seconds_count", model="scripted", mode="native") >= 2
    assert delta("reactq_run_seconds_count", status="succeeded") >= 1
    # The run is no longer in flight, and left no turn clock behind.
    assert not any(r.hexists(k, handle.run_id) for k in Keys().metrics_all("inflight"))
    assert not any(r.hexists(k, handle.run_id) for k in Keys().metrics_all("turns"))
    # Histograms are cumulative and consistent.
    inf = _value(after, "reactq_tool_call_seconds_bucket", tool="calculator", le="+Inf")
    assert inf == _value(after, "reactq_tool_call_seconds_count", tool="calculator")
    assert _value(after, "reactq_tool_call_seconds_bucket", tool="calculator", le="0.005") <= inf
    queues = {dict(k)["queue"] for k in after["reactq_queue_depth"]}
    assert queues == {"reactq.runs", "reactq.tools", "reactq.webhooks"}


def test_llm_and_tool_failures_are_counted_by_model_and_tool(workers, dispatcher, llm, settings):
    before = snapshot(settings)
    q_tool = llm.script(llm.unique("metrics: a failing tool"), [
        reply_tool_calls([("c1", "calculator", {"expression": "1/0"})]),
        reply_text("cannot divide"),
    ])
    q_llm = llm.script(llm.unique("metrics: a failing model"), [
        reply_error(400, {"error": {"message": "bad request"}}),
    ])
    assert dispatcher.submit(RunRequest(query=q_tool)).result(timeout=30)["status"] == "succeeded"
    assert dispatcher.submit(RunRequest(query=q_llm)).result(timeout=30)["status"] == "failed"

    def errors(snap: dict[str, Any]) -> float:
        return _value(snap, "reactq_llm_errors_total", model="scripted", code="400")

    after = _settled(settings, lambda snap: errors(snap) > errors(before))
    assert (_value(after, "reactq_tool_errors_total", tool="calculator", kind="error")
            > _value(before, "reactq_tool_errors_total", tool="calculator", kind="error"))
    assert (_value(after, "reactq_llm_errors_total", model="scripted", code="400")
            > _value(before, "reactq_llm_errors_total", model="scripted", code="400"))
    assert (_sum(after, "reactq_runs_ended_total", status="failed")
            > _sum(before, "reactq_runs_ended_total", status="failed"))


def test_render_is_prometheus_text_with_every_family(workers, settings):
    body, content_type = render(settings)
    text = body.decode()
    assert content_type.startswith("text/plain")
    for fam in READER_FAMILIES.values():
        assert f"# TYPE {fam.prom_name}" in text
    assert re.search(r'^reactq_queue_depth\{queue="reactq.runs"\} \d', text, re.M)
    assert re.search(r'^reactq_queue_depth\{queue="reactq.tools"\} \d', text, re.M)
    assert re.search(r"^reactq_runs_in_flight \d", text, re.M)
    assert re.search(r"^reactq_broker_up 1", text, re.M)


def test_queue_depth_counts_kombus_lists_with_their_priority_suffixes(redis_url):
    """Messages nobody consumes (db 9 has no workers) are counted per queue, priorities included."""
    from celery import Celery

    from reactq.shared.wire import celery_config

    base = redis_url.rsplit("/", 1)[0]
    settings = Settings(redis_url=f"{base}/9")
    redis.Redis.from_url(settings.redis_url).flushdb()
    app = Celery("metrics-test")
    app.conf.update(celery_config(settings))
    for priority in (0, 0, 5, 9):
        app.send_task("reactq.iterate", args=["r", 0], queue="reactq.runs", priority=priority)
    app.send_task("reactq.tool", args=["r", 0, "c"], queue="reactq.tools")
    keys = {k.decode(errors="replace") for k in redis.Redis.from_url(settings.redis_url).keys("reactq.*")}
    assert any("\x06\x16" in k for k in keys), keys  # kombu really used a priority list
    snap = snapshot(settings)
    assert _value(snap, "reactq_queue_depth", queue="reactq.runs") == 4
    assert _value(snap, "reactq_queue_depth", queue="reactq.tools") == 1


@pytest.mark.core
def test_the_gateway_serves_metrics(workers, settings):
    """``GET /metrics`` on the HTTP gateway (once ``dispatcher/http.py`` exists)."""
    try:
        http = importlib.import_module("reactq.dispatcher.http")
    except ImportError as exc:
        pytest.skip(f"reactq.dispatcher.http is not there yet: {exc}")
    factory = getattr(http, "create_app", None) or getattr(http, "make_app", None)
    if factory is None:
        pytest.skip("reactq.dispatcher.http has no create_app(settings)")
    from starlette.testclient import TestClient

    with TestClient(factory(settings)) as client:
        resp = client.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain")
    assert "reactq_runs_started_total" in resp.text
    assert "reactq_queue_depth" in resp.text
    json.dumps(resp.text)  # plain text, no binary


async def test_the_metering_wrapper_times_chat_and_stream_and_counts_errors_and_tokens():
    """``MeteredLLM`` in isolation (fakeredis): what it records, and that it stays transparent."""
    import fakeredis

    from reactq.shared.errors import LLMError
    from reactq.shared.keys import Keys
    from reactq.shared.llm.testing import ScriptedLLM, text
    from reactq.shared.models import ChatMessage
    from reactq.workers.metrics import MeteredLLM, Recorder

    err = LLMError("rate limited")
    err.status_code = 429  # type: ignore[attr-defined]
    inner = ScriptedLLM([text("hi", usage={"prompt_tokens": 7, "completion_tokens": 2}), err,
                         text("streamed", usage={"prompt_tokens": 3, "completion_tokens": 1})],
                        name="m1", abilities={"tool_call": True}, context_size=1000)
    client = fakeredis.FakeRedis()
    rec = Recorder(client, Keys())
    llm = MeteredLLM(inner, rec)
    assert (llm.name, llm.abilities, llm.context_size) == ("m1", {"tool_call": True}, 1000)
    msgs = [ChatMessage(role="user", content="q")]
    assert (await llm.chat(msgs)).message.content == "hi"
    with pytest.raises(LLMError):
        await llm.chat(msgs)
    chunks = [c async for c in llm.stream_chat(msgs)]
    assert chunks[-1].finish_reason == "stop"
    assert client.keys("*") == []  # summed in the process, written once a second
    rec.sums.flush()

    samples = {}
    for fam in READER_FAMILIES.values():
        raw = client.hgetall(rec.key(fam.name))  # this process's shard
        metric = counter_family(fam, raw) if fam.kind == "counter" else histogram_family(fam, raw)
        samples.update({(x.name, tuple(sorted(x.labels.items()))): x.value for x in metric.samples})
    assert samples[("reactq_llm_call_seconds_count", (("model", "m1"),))] == 3
    assert samples[("reactq_llm_errors_total", (("code", "429"), ("model", "m1")))] == 1
    assert samples[("reactq_llm_tokens_total", (("kind", "prompt"), ("model", "m1")))] == 10
    assert samples[("reactq_llm_tokens_total", (("kind", "completion"), ("model", "m1")))] == 3


def test_a_tool_name_the_model_invents_is_labelled_unknown(workers, dispatcher, llm, settings):
    """Labels carry only registered tool and model names: a made-up name (here carrying an
    e-mail address) never shows in ``/metrics``, and the label set stays bounded."""
    invented = "lookup_alice@example.com"
    before = snapshot(settings)
    q = llm.script(llm.unique("metrics: an invented tool"), [
        reply_tool_calls([("c1", invented, {"q": "x"})]),
        reply_text("no such tool"),
    ])
    assert dispatcher.submit(RunRequest(query=q)).result(timeout=30)["status"] == "succeeded"
    body, _ = render(settings)
    assert "alice@example.com" not in body.decode()
    after = snapshot(settings)
    assert (_value(after, "reactq_tool_errors_total", tool="unknown", kind="error")
            > _value(before, "reactq_tool_errors_total", tool="unknown", kind="error"))
