"""One trace per run across worker processes: real workers export OTLP/HTTP to a tiny
collector this test runs (the only configuration is OTEL_EXPORTER_OTLP_ENDPOINT)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis

pytest.importorskip("opentelemetry.proto", reason="the `otel` extra")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from reactq.dispatcher.client import Dispatcher  # noqa: E402
from reactq.shared.settings import Settings  # noqa: E402
from tests.integration.conftest import LLMFixture, WorkerFactory  # noqa: E402
from tests.scripted_server import reply_text, reply_tool_calls  # noqa: E402

pytestmark = pytest.mark.integration


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


class Collector:
    """Accepts OTLP/HTTP protobuf on /v1/traces and keeps every span as a dict."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        lock = threading.Lock()
        spans = self.spans

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                req = ExportTraceServiceRequest.FromString(body)
                with lock:
                    for rs in req.resource_spans:
                        res = {a.key: _value(a.value) for a in rs.resource.attributes}
                        for ss in rs.scope_spans:
                            for s in ss.spans:
                                spans.append({
                                    "name": s.name, "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                                    "parent": s.parent_span_id.hex(), "pid": res.get("process.pid"),
                                    "attrs": {a.key: _value(a.value) for a in s.attributes}})
                out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.server.shutdown()


def test_a_run_is_one_trace_across_worker_processes(redis_url: str, llm: LLMFixture, tmp_path: Path,
                                                    collector: Collector) -> None:
    url = redis_url.rsplit("/", 1)[0] + "/14"
    redis.Redis.from_url(url).flushdb()
    otel_env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    factory = WorkerFactory(url, llm, tmp_path)
    runs_w = factory.start("otel-runs", queues="reactq.runs", concurrency=2, wait=False, **otel_env)
    tools_w = factory.start("otel-tools", queues="reactq.tools", concurrency=2, wait=False, **otel_env)
    try:
        factory.wait_ready(runs_w)
        factory.wait_ready(tools_w)
        q = llm.unique("traced question")
        llm.script(q, [reply_tool_calls([("call-t1", "slow", {"tag": "t1", "seconds": 0.1}),
                                         ("call-t2", "slow", {"tag": "t2", "seconds": 0.1})]),
                       reply_text("enough")], synthesis=reply_text("traced answer"))
        d = Dispatcher(Settings(redis_url=url, tools="tests.integration.tools:TOOLS", openai_api_key="k"))
        handle = d.submit({"query": q})
        assert handle.result(timeout=60)["status"] == "succeeded"
        run_id = handle.run_id

        def names() -> list[str]:
            return [s["name"] for s in collector.spans]

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (
                names().count("execute_tool slow") >= 2 and "reactq.answer" in names()
                and sum(n.startswith("chat ") for n in names()) >= 3):
            time.sleep(0.1)
    finally:
        factory.stop_all()

    spans = collector.spans
    by_id = {s["span_id"]: s for s in spans}
    mine = [s for s in spans if s["trace_id"] == run_id]  # the run id *is* the trace id
    assert {s["trace_id"] for s in spans} == {run_id}, "every span of the run in one trace"
    tasks = [s for s in mine if s["name"].startswith("reactq.")]
    assert {s["name"] for s in tasks} >= {"reactq.iterate", "reactq.tool", "reactq.answer"}
    assert len({s["pid"] for s in mine}) == 2, "spans from both worker processes"

    # Parent/child across processes: each tool task's parent is the iterate task that
    # published it, on the other worker; each tool call's span is inside its tool task.
    tool_tasks = [s for s in tasks if s["name"] == "reactq.tool"]
    assert len(tool_tasks) == 2
    for t in tool_tasks:
        parent = by_id[t["parent"]]
        assert parent["name"] == "reactq.iterate" and parent["pid"] != t["pid"]
    for call in [s for s in mine if s["name"] == "execute_tool slow"]:
        assert by_id[call["parent"]]["name"] == "reactq.tool"
        assert call["attrs"]["gen_ai.tool.call.id"] in ("call-t1", "call-t2")

    # LLM calls: GenAI attributes, inside a step task, and no message content by default.
    chats = [s for s in mine if s["name"].startswith("chat ")]
    for c in chats:
        assert by_id[c["parent"]]["name"] in ("reactq.iterate", "reactq.answer")
        assert c["attrs"]["gen_ai.operation.name"] == "chat"
        assert c["attrs"]["gen_ai.usage.input_tokens"] > 0
        assert c["attrs"]["gen_ai.response.finish_reasons"]
        assert q not in repr(c["attrs"]) and "traced answer" not in repr(c["attrs"])
    assert any(c["attrs"].get("gen_ai.request.stream") for c in chats)
