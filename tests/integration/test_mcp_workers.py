"""MCP tools through real Celery workers: calls over stdio, streamable HTTP and the published
``mcp-server-time``, fan-out over two worker processes (one session per server per
process), tool selection over a hub of 20+ MCP tools, a server killed mid-run, and a
destructive MCP tool not re-run after kill -9 of its worker.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from reactq.dispatcher.client import Dispatcher
from reactq.shared.keys import Keys
from reactq.shared.requests import RunRequest
from reactq.shared.settings import Settings
from tests.integration.conftest import WorkerFactory
from tests.mcp.servers import HttpMcpServer, write_config
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = [pytest.mark.integration, pytest.mark.mcp]
_dbs = itertools.count(8)


@pytest.fixture(scope="module")
def http_server(tmp_path_factory):
    server = HttpMcpServer(tmp_path_factory.mktemp("mcp-http") / "http.log").start()
    yield server
    server.kill()


def _cluster(redis_url: str, llm: Any, tmp: Path, http_url: str, n: int):
    url = redis_url.rsplit("/", 1)[0] + f"/{next(_dbs)}"
    cfg = write_config(tmp / "mcp.toml", http_url=http_url)
    factory = WorkerFactory(url, llm, tmp)
    started = [factory.start(f"mcp-{i}", wait=False, concurrency=2, REACTQ_MCP=str(cfg))
               for i in range(n)]
    for w in started:
        factory.wait_ready(w, timeout=60)
    settings = Settings(redis_url=url, model="scripted", tools="tests.integration.tools:TOOLS",
                        openai_api_key="k", openai_base_url=llm.server.base_url)
    return factory, Dispatcher(settings), {w.proc.pid: w for w in started}, redis.Redis.from_url(url)


@pytest.fixture(scope="module")
def pair(redis_url, llm, tmp_path_factory, http_server):
    factory, d, workers, r = _cluster(redis_url, llm, tmp_path_factory.mktemp("pair"), http_server.url, 2)
    yield d, workers, r
    factory.stop_all()


@pytest.fixture(scope="module")
def single(redis_url, llm, tmp_path_factory, http_server):
    """One worker for the kill tests: the call after a kill lands where the session died (each
    case's first call finds the session the previous case recovered, as a long-lived worker would)."""
    factory, d, workers, r = _cluster(redis_url, llm, tmp_path_factory.mktemp("single"), http_server.url, 1)
    yield d, workers, r
    factory.stop_all()


class _Gated(list):
    """Script turns whose turn ``gate`` waits for ``event`` (the scripted server runs in
    this process, on its own thread)."""

    def __init__(self, items: list[Any], *, gate: int, event: threading.Event) -> None:
        super().__init__(items)
        self.gate, self.event = gate, event

    def __getitem__(self, i: Any) -> Any:
        if i == self.gate:
            self.event.wait(60)
        return super().__getitem__(i)


def _wait(predicate, timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _tool_done(d: Dispatcher, run_id: str) -> dict[str, dict[str, Any]]:
    events = [e for _, e in d.handle(run_id).events(timeout=60)]
    return {e.data["tool_call_id"]: e.data for e in events
            if e.channel == "step" and e.data.get("type") == "iteration" and e.data["status"] == "done"}


def _tool_messages(request: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request["messages"] if m["role"] == "tool"}


def test_calls_over_stdio_http_and_a_published_server_run_on_the_workers(pair, llm):
    d, _, _ = pair
    q = llm.script(llm.unique("mcp calls"), [
        reply_tool_calls([("s", "demo__add", {"a": 2, "b": 3}),
                          ("h", "web__add", {"a": 40, "b": 2}),
                          ("t", "time__get_current_time", {"timezone": "Asia/Tokyo"})]),
        reply_text("done"),
    ])
    h = d.submit(RunRequest(query=q, tools=["demo__add", "web__add", "time__get_current_time"]))
    assert h.result(timeout=60)["status"] == "succeeded"
    first, second = llm.requests_for(q)[:2]
    offered = {t["function"]["name"]: t["function"] for t in first["tools"]}
    assert offered["demo__add"]["parameters"]["properties"]["a"]["type"] == "integer"
    seen = _tool_messages(second)
    assert seen["s"] == "5" and seen["h"] == "42" and "Asia/Tokyo" in seen["t"]


def test_parallel_calls_fan_out_to_two_worker_processes_with_one_session_each(pair, llm):
    d, workers, _ = pair
    calls = [(f"c{i}", "demo__slow", {"seconds": 1.5}) for i in range(4)]
    q = llm.script(llm.unique("mcp fan-out"), [reply_tool_calls(calls), reply_text("done")])
    h = d.submit(RunRequest(query=q, tools=["demo__slow"]))
    assert h.result(timeout=60)["status"] == "succeeded"
    done = _tool_done(d, h.run_id)
    assert all(not v["error"] for v in done.values())
    server_pids = {re.search(r"in pid (\d+)", v["observation"]).group(1) for v in done.values()}
    # Four calls, two stdio server processes: one per worker process, shared by its threads.
    assert len(server_pids) == 2, f"each worker process talks to its own server: {server_pids}"


def test_tool_selection_picks_from_a_hub_of_twenty_mcp_tools(pair, llm):
    d, _, _ = pair
    q = llm.unique("what are the tides at Brest")
    llm.script(q, [reply_tool_calls([("x", "demo__hub_18", {"query": "Brest"})]), reply_text("done")])
    # The selection prompt quotes the query under "User query:"; this longer key matches it.
    llm.script(f"User query:\n{q}", [reply_text(json.dumps({"tools": ["demo__hub_18"]}))])
    h = d.submit(RunRequest(query=q))
    assert h.result(timeout=60)["status"] == "succeeded"
    events = [e for _, e in d.handle(h.run_id).events(timeout=10)]
    phase = next(e for e in events if e.channel == "phase" and e.data["phase"] == "selecting_tools")
    assert phase.data["total_tools"] > 20 + 20  # two servers' hubs + built-ins
    loop_requests = [r for r in llm.requests_for(q) if r.get("tools")]
    assert [t["function"]["name"] for t in loop_requests[0]["tools"]] == ["demo__hub_18"]
    assert _tool_messages(loop_requests[1])["x"] == "tides: no results for 'Brest'"


@pytest.mark.parametrize("server", ["demo", "web"])
def test_a_server_killed_mid_call_gives_an_error_observation_then_the_next_call_recovers(
        single, llm, tmp_path, http_server, server):
    d, _, _ = single
    pid_file = tmp_path / "server.pid"
    back = threading.Event()
    q = llm.unique(f"mcp kill {server}")
    # The second turn is answered only once the test brought the HTTP server back.
    llm.book.scripts[q] = (_Gated([
        reply_tool_calls([("slow", f"{server}__slow", {"seconds": 30, "pid_file": str(pid_file)})]),
        reply_tool_calls([("again", f"{server}__add", {"a": 2, "b": 2})]),
        reply_text("recovered"),
    ], gate=1, event=back), None)
    h = d.submit(RunRequest(query=q, tools=[f"{server}__slow", f"{server}__add"]))
    pid = int(_wait(lambda: pid_file.exists() and pid_file.read_text(), what="the call to start"))
    if server == "web":
        http_server.kill()
        http_server.start()
    else:
        os.kill(pid, signal.SIGKILL)
    back.set()
    result = h.result(timeout=60)
    assert result["status"] == "succeeded"
    done = _tool_done(d, h.run_id)
    assert done["slow"]["error"].startswith(f"MCP server '{server}' is unavailable")
    assert done["again"]["observation"] == "4" and not done["again"]["error"], json.dumps(done["again"])
    requests = llm.requests_for(q)
    assert "is unavailable" in _tool_messages(requests[1])["slow"]


def test_a_destructive_mcp_tool_is_not_rerun_after_its_worker_is_killed(pair, llm, tmp_path):
    d, workers, r = pair
    target = tmp_path / "appended.txt"
    q = llm.script(llm.unique("mcp destructive kill"), [
        reply_tool_calls([("w", "demo__append_line", {"path": str(target), "line": "once", "seconds": 3})]),
        reply_text("could not confirm"),
    ])
    h = d.submit(RunRequest(query=q, tools=["demo__append_line"]))
    _wait(lambda: target.exists() and target.read_text(), what="the tool to start")
    member = f"tool:{h.run_id}:w"
    raw = _wait(lambda: r.hget(Keys().lease_tasks_for(member), member), what="the tool's lease")
    workers[int(json.loads(raw)["worker"].rsplit(":", 1)[1])].kill()
    assert h.result(timeout=60)["status"] == "succeeded"
    assert target.read_text().splitlines() == ["once"], "never silently run again"
    events = [e for _, e in d.handle(h.run_id).events(timeout=10)]
    assert any(e.channel == "error" and e.data["kind"] == "tool_uncertain" for e in events)


def test_the_gateway_lists_the_published_catalog_without_secrets(pair, llm, tmp_path):
    import httpx2

    from tests.integration.conftest import worker_env
    from tests.integration.test_gateway import start_gateway, stop_gateway

    d, _, _ = pair
    env = worker_env(d.settings.redis_url, llm, REACTQ_API_TOKEN="tok", OPENAI_API_KEY="sk-very-secret")
    gw = start_gateway(env, tmp_path / "gateway.log")
    try:
        assert httpx2.get(f"{gw.url}/v1/tools", timeout=10).status_code == 401
        auth = {"Authorization": "Bearer tok"}
        tools = httpx2.get(f"{gw.url}/v1/tools", headers=auth, timeout=10).json()
        models = httpx2.get(f"{gw.url}/v1/models", headers=auth, timeout=10)
    finally:
        stop_gateway(gw)
    assert tools["published"] is True
    by_name = {t["name"]: t for t in tools["tools"]}
    assert by_name["demo__add"]["mcp_server"] == "demo" and by_name["demo__add"]["idempotent"] is True
    assert by_name["demo__append_line"]["idempotent"] is False
    assert by_name["web__add"]["parameters"]["required"] == ["a", "b"]
    assert by_name["http_fetch"]["idempotent"] is True and "calculator" in by_name
    assert models.json()["published"] is True and models.json()["models"][0]["name"]
    assert "sk-very-secret" not in models.text and "test-key" not in models.text
