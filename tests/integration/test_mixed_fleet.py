"""Workers with different tools in one cluster (``workers/runs/handon.py``): a worker never
answers for a tool it lacks. Real workers of two tool sets on a broker of their own."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from reactq.dispatcher.client import Dispatcher
from reactq.dispatcher.http import create_app
from reactq.shared.requests import RunRequest
from reactq.shared.settings import Settings
from tests.integration.conftest import Backend, LLMFixture, WorkerFactory
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = pytest.mark.integration

DB = 10
#: Workers without the test tools: built-ins and demo tools only.
PLAIN = {"REACTQ_TOOLS": ""}


class Fleet:
    def __init__(self, d: Dispatcher, r: redis.Redis, factory: WorkerFactory) -> None:
        self.d, self.r, self.factory = d, r, factory


@pytest.fixture
def fleet(backend: Backend, llm: LLMFixture, tmp_path: Path) -> Iterator[Fleet]:
    url, env = backend.isolated(DB)
    r = backend.client(url)
    if backend.kind != "cluster":
        r.flushdb()
    factory = WorkerFactory(url, llm, tmp_path, env)
    settings = Settings(redis_url=url, model="scripted", demo_tools=True, openai_api_key="k",
                        openai_base_url=llm.server.base_url, **backend.settings(env))
    yield Fleet(Dispatcher(settings), r, factory)
    factory.stop_all()


def _slow_run(f: Fleet, llm: LLMFixture, tag: str) -> Any:
    q = llm.script(llm.unique(f"mixed {tag}"), [
        reply_tool_calls([("c1", "slow", {"tag": tag, "seconds": 0})]),
        reply_text("done"),
    ], synthesis=reply_text(f"answer {tag}"))
    return f.d.submit(RunRequest(query=q, tools=["slow"], completion_check=False)), q


def _tool_events(h: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    events = [e for _, e in h.events(timeout=90)]
    tools = [e.data for e in events if e.channel == "step" and e.data.get("type") == "iteration"
             and e.data.get("status") == "done"]
    errors = [e.data for e in events if e.channel == "error"]
    return tools, errors


def _ran_on(r: redis.Redis, tag: str) -> list[int]:
    return [json.loads(x)["pid"] for x in r.lrange("reactq-test:toolruns", 0, -1) if json.loads(x)["tag"] == tag]


def _handed_on(*logs: Path) -> int:
    return sum(p.read_text(errors="replace").count("handed on") for p in logs)


def test_a_tool_call_reaching_a_worker_without_the_tool_runs_where_the_tool_is(
        fleet: Fleet, llm: LLMFixture) -> None:
    full = fleet.factory.start("full", concurrency=2)
    plain = fleet.factory.start("plain", concurrency=4, **PLAIN)  # the catalog is the last one's
    with TestClient(create_app(fleet.d.settings)) as client:
        listed = [t["name"] for t in client.get("/v1/tools").json()["tools"]]
    assert "slow" in listed and "calculator" in listed, "every live worker's tools"
    # Rounds of 8 runs until some call reached the plain worker first (most often the first
    # round does; which worker takes a call is up to the broker and the machine's load).
    for round_ in range(4):
        runs = [_slow_run(fleet, llm, f"mix-{round_}{i}-{uuid.uuid4().hex[:4]}") for i in range(8)]
        for h, q in runs:
            tools, errors = _tool_events(h)
            assert h.result(timeout=30)["status"] == "succeeded"
            assert [t.get("observation") for t in tools] == [f"slow {q.split()[1]} done"], (tools[0].get("error"), errors)
            assert errors == []
            # Every LLM call was shown the tool, whichever worker made it.
            for body in llm.requests_for(q):
                if not body.get("stream"):
                    assert "slow" in [t["function"]["name"] for t in body.get("tools") or []]
            assert set(_ran_on(fleet.r, q.split()[1])) == {full.proc.pid}
        if _handed_on(plain.log) >= 1:
            break
    assert _handed_on(plain.log) >= 1, "with 32 runs some call reached the plain worker first"


def test_a_made_up_name_is_answered_at_once_and_a_missing_tool_waits_then_errors(
        fleet: Fleet, llm: LLMFixture) -> None:
    full = fleet.factory.start("full", concurrency=2)
    plain = fleet.factory.start("plain", concurrency=2, REACTQ_TOOL_UNAVAILABLE_S="2", **PLAIN)
    full.stop()  # a graceful stop withdraws its tools at once
    q = llm.script(llm.unique("made up"), [
        reply_tool_calls([("c1", "no_such_tool", {}), ("c2", "slow", {"tag": "gone", "seconds": 0})]),
        reply_text("done"),
    ], synthesis=reply_text("final"))
    started = time.monotonic()
    h = fleet.d.submit(RunRequest(query=q, completion_check=False))
    tools, errors = _tool_events(h)
    assert h.result(timeout=30)["status"] == "succeeded", "the model is told; the run goes on"
    by_name = {t["tool_name"]: t for t in tools}
    assert by_name["no_such_tool"]["error"].startswith("Unknown tool 'no_such_tool'")
    gone = by_name["slow"]["error"]
    assert "'slow'" in gone and "REACTQ_TOOLS" in gone
    assert [e["kind"] for e in errors] == ["tool_unavailable"]
    assert errors[0]["tool_name"] == "slow" and "REACTQ_TOOLS" in errors[0]["message"]
    assert 2 <= time.monotonic() - started < 20
    assert plain.proc.poll() is None


def test_runs_go_on_through_a_rolling_replacement_that_adds_a_tool(fleet: Fleet, llm: LLMFixture) -> None:
    """Old workers lack ``slow``; new ones have it. Runs submitted all along every step of the
    replacement end with the tool's own observation, never "Unknown tool"."""
    old = [fleet.factory.start(f"old{i}", wait=False, concurrency=2, **PLAIN) for i in range(2)]
    for w in old:
        fleet.factory.wait_ready(w)
    new = [fleet.factory.start("new0", concurrency=2)]
    runs = [_slow_run(fleet, llm, f"roll-a{i}-{uuid.uuid4().hex[:4]}") for i in range(3)]
    old[0].stop()
    runs += [_slow_run(fleet, llm, f"roll-b{i}-{uuid.uuid4().hex[:4]}") for i in range(3)]
    new.append(fleet.factory.start("new1", concurrency=2))
    old[1].stop()
    runs += [_slow_run(fleet, llm, f"roll-c{i}-{uuid.uuid4().hex[:4]}") for i in range(3)]
    new[0].stop()
    runs += [_slow_run(fleet, llm, f"roll-d{i}-{uuid.uuid4().hex[:4]}") for i in range(3)]
    for h, q in runs:
        tools, errors = _tool_events(h)
        tag = q.split()[1]
        assert [t.get("observation") for t in tools] == [f"slow {tag} done"], (tag, tools, errors)
        assert errors == [] and h.result(timeout=30)["status"] == "succeeded"
