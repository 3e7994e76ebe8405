"""Issue 10, items 1–3 with real workers: a busy tool is never run twice, a poison pill is
refused, every call has a real deadline, one reply cannot occupy the fleet, and the demo
tools are off by default.

The GIL-holding tool (``hold_gil`` in ``tests/integration/tools.py``) holds the GIL in one C
call for 8 s against the workers' 1.5 s lease (``worker_env``): 5 leases, the ratio of the
issue's 60 s against 3 s would cost this suite a minute per test. The fault suite
(``python -m bench.faults tools``) runs the full 60 s hold against the default 3 s lease.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from reactq.dispatcher.client import Dispatcher
from reactq.shared.requests import RunRequest
from reactq.shared.settings import Settings
from tests.integration.conftest import LLMFixture, WorkerFactory
from tests.scripted_server import reply_text, reply_tool_calls

DB = 14  # a database of its own: no other test's watchdog sees these leases
HOLD_SECONDS = 8


@pytest.fixture(scope="module")
def cluster(redis_url: str, llm: LLMFixture,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Dispatcher, WorkerFactory, redis.Redis]]:
    url = redis_url.rsplit("/", 1)[0] + f"/{DB}"
    r = redis.Redis.from_url(url)
    r.flushdb()
    factory = WorkerFactory(url, llm, tmp_path_factory.mktemp("toolsafety"))
    started = [factory.start(name, wait=False, concurrency=2) for name in ("ts-a", "ts-b")]
    for w in started:
        factory.wait_ready(w)
    settings = Settings(redis_url=url, model="scripted", tools="tests.integration.tools:TOOLS",
                        openai_api_key="k", openai_base_url=llm.server.base_url, demo_tools=True)
    yield Dispatcher(settings), factory, r
    factory.stop_all()


def _runs(r: redis.Redis, key: str, tag: str) -> list[dict[str, Any]]:
    return [x for x in (json.loads(v) for v in r.lrange(key, 0, -1)) if x["tag"] == tag]


def _events(d: Dispatcher, run_id: str) -> list[Any]:
    return [e for _, e in d.handle(run_id).events(timeout=120)]


def _done_iterations(events: list[Any]) -> list[dict[str, Any]]:
    return [e.data for e in events
            if e.channel == "step" and e.data.get("type") == "iteration" and e.data.get("status") == "done"]


def _tool_messages(llm: LLMFixture, query: str) -> list[dict[str, Any]]:
    """The tool results of the last loop request that had any (the LLM's view)."""
    for req in reversed(llm.requests_for(query)):
        msgs = [m for m in req["messages"] if m["role"] == "tool"]
        if msgs:
            return msgs
    return []


def _wait(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return "\nState:\tZ" in state  # a zombie nobody reaped has stopped running


def test_a_tool_holding_the_gil_longer_than_the_lease_runs_once_and_is_not_uncertain(cluster, llm):
    """Item 1: an 8 s GIL hold (non-idempotent tool) against a 1.5 s lease: the heartbeat of
    the worker is not starved (the tool runs in a tool-runner process), so nobody resends it."""
    d, _, r = cluster
    tag = llm.unique("gil")
    q = llm.script(llm.unique("hold the gil"), [
        reply_tool_calls([("g1", "hold_gil", {"tag": tag, "seconds": HOLD_SECONDS})]),
        reply_text("held"),
    ], synthesis=reply_text("all good"))
    h = d.submit(RunRequest(query=q))
    assert h.result(timeout=90)["status"] == "succeeded"
    events = _events(d, h.run_id)
    assert not [e for e in events if e.channel == "error"], "no tool_uncertain (nor any) error"
    (done,) = _done_iterations(events)
    assert done["error"] is None and not done.get("uncertain")
    assert len(_runs(r, "reactq-test:toolstarts", tag)) == 1, "started exactly once"
    assert len(_runs(r, "reactq-test:toolruns", tag)) == 1, "completed exactly once"


def test_a_worker_killed_while_a_gil_holding_tool_runs_is_resumed_elsewhere(cluster, llm):
    """Item 1: liveness still works: kill -9 of the worker (its pid only, not its group)
    while the tool holds the GIL; the tool-runner dies with it, and the call is resumed on
    the other worker within a few seconds (lease 1.5 s + watchdog pass 1 s)."""
    d, factory, r = cluster
    factory.start("ts-spare", concurrency=2)  # whoever is killed, two workers stay
    tag = llm.unique("gil-kill")
    q = llm.script(llm.unique("hold then die"), [
        reply_tool_calls([("k1", "hold_gil_retry", {"tag": tag, "seconds": 4})]),
        reply_text("resumed"),
    ])
    h = d.submit(RunRequest(query=q))
    first = _wait(lambda: _runs(r, "reactq-test:toolstarts", tag), 30, "the tool to start")[0]
    # The worker is the tool-runner's parent (before the fix, the tool ran in the worker).
    pids = {w.proc.pid for w in factory.started}
    victim = first["ppid"] if first["ppid"] in pids else first["pid"]
    os.kill(victim, signal.SIGKILL)
    killed_at = time.time()
    _wait(lambda: _gone(first["pid"]), 10, "the tool-runner to die with its worker")
    second = _wait(lambda: _runs(r, "reactq-test:toolstarts", tag)[1:], 20, "the call to resume")[0]
    assert second["ppid"] != victim
    # The issue asks for 5 s; the bound is looser here (a loaded 2-core box), the fault
    # suite reports the figure.
    assert second["started"] - killed_at < 10
    assert h.result(timeout=60)["status"] == "succeeded"
    assert len(_runs(r, "reactq-test:toolruns", tag)) == 1, "only the resumed call completed"


POISON = ["round(1, -10**8)", "round(10**999, -10**6)", "round(1, -10**8) + 1",
          "max(round(2, -99999999), 1)"]


def test_poison_pill_calculator_calls_are_refused_fast_and_the_run_goes_on(cluster, llm):
    """Item 2: ``round(1, -10**8)`` used to freeze a worker for minutes (and the next one)."""
    d, _, _ = cluster
    calls = [(f"p{i}", "calculator", {"expression": e}) for i, e in enumerate(POISON)]
    calls.append(("ts", "text_stats", {"text": "." * 100_000 + "x"}))  # was quadratic
    q = llm.script(llm.unique("poison"), [reply_tool_calls(calls), reply_text("refused")])
    started = time.monotonic()
    h = d.submit(RunRequest(query=q))
    assert h.result(timeout=60)["status"] == "succeeded"
    assert time.monotonic() - started < 30  # minutes before the fix
    done = {x["tool_call_id"]: x for x in _done_iterations(_events(d, h.run_id))}
    for i in range(len(POISON)):
        assert "ndigits" in (done[f"p{i}"]["error"] or ""), done[f"p{i}"]
    assert json.loads(done["ts"]["observation"])["sentences"] == 1


def test_a_tool_past_its_deadline_is_stopped_and_the_llm_gets_an_error_naming_it(cluster, llm):
    """Item 2: ``Tool.timeout`` = 2 s stops a call that holds the GIL for 10 s (the process
    is killed: it never completes); the LLM sees why and the run goes on."""
    d, _, r = cluster
    tag = llm.unique("deadline")
    q = llm.script(llm.unique("too slow"), [
        reply_tool_calls([("t1", "hold_gil_2s", {"tag": tag, "seconds": 10})]),
        reply_text("gave up on it"),
    ], synthesis=reply_text("went on"))
    h = d.submit(RunRequest(query=q))
    result = h.result(timeout=60)
    assert result["status"] == "succeeded" and result["answer"] == "went on"
    (done,) = _done_iterations(_events(d, h.run_id))
    assert "timed out after 2s" in done["error"]
    assert "timed out after 2s" in _tool_messages(llm, q)[0]["content"]
    time.sleep(1)
    assert _runs(r, "reactq-test:toolruns", tag) == [], "the call was stopped, not finished"


def test_one_reply_with_32_calls_runs_16_and_answers_the_rest_with_an_error(cluster, llm):
    """Item 3: REACTQ_MAX_TOOL_CALLS_PER_TURN (16) calls run; the other 16 get an error."""
    d, _, r = cluster
    tags = [llm.unique(f"cap{i}") for i in range(32)]
    calls = [(f"c{i}", "slow", {"tag": t, "seconds": 0}) for i, t in enumerate(tags)]
    q = llm.script(llm.unique("thirty-two calls"), [reply_tool_calls(calls), reply_text("ok")])
    h = d.submit(RunRequest(query=q))
    assert h.result(timeout=90)["status"] == "succeeded"
    ran = {x["tag"] for x in (json.loads(v) for v in r.lrange("reactq-test:toolruns", 0, -1))}
    assert [t in ran for t in tags] == [True] * 16 + [False] * 16
    done = {x["tool_call_id"]: x for x in _done_iterations(_events(d, h.run_id))}
    assert len(done) == 32
    assert all(done[f"c{i}"]["error"] is None for i in range(16))
    assert all("at most 16 run per turn" in done[f"c{i}"]["error"] for i in range(16, 32))
    assert len(_tool_messages(llm, q)) == 32, "every call of the reply is answered in the history"


def test_demo_tools_are_not_registered_by_default(redis_url, llm, worker_factory):
    """Item 3: a worker without REACTQ_DEMO_TOOLS publishes no echo/add/sleep."""
    url = redis_url.rsplit("/", 1)[0] + f"/{DB + 1}"
    r = redis.Redis.from_url(url)
    r.flushdb()
    factory = WorkerFactory(url, llm, worker_factory.tmp)
    worker_factory.started.append(factory.start("ts-nodemo", concurrency=1, REACTQ_DEMO_TOOLS="false"))
    names = {t["name"] for t in json.loads(_wait(lambda: r.hget("reactq:catalog", "tools"), 20, "the catalog"))}
    assert {"calculator", "slow"} <= names
    assert not {"echo", "add", "sleep"} & names
