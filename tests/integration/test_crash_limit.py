"""A poison pill is not sent again (issue 10 item 2, second bullet).

Workers are kept alive by a supervisor thread (a worker that dies is replaced, as a
process manager would), with ``REACTQ_MAX_TASK_CRASHES=3``:

* a tool call that kills its worker every time (``die``) is run three times, then answered
  with an error observation; the run goes on and the LLM sees why (``tool_crashed``);
* a run whose step kills its worker every time (a test-only fault point) ends ``failed``
  with ``error`` ``kind: "task_crashed"`` and ``done`` after three deaths;
* another run on the same fleet finishes normally throughout.

Part of the fault tier (``make test-faults``).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from reactq.dispatcher.client import Dispatcher
from reactq.shared.redisconn import free_port, start_server
from reactq.shared.requests import RunRequest
from reactq.shared.settings import Settings
from tests.integration.conftest import LLMFixture, Worker, WorkerFactory
from tests.scripted_server import reply_text, reply_tool_calls

# Kill loops: each test kills LIMIT workers and waits for their replacements (≈ 15 s each).
pytestmark = [pytest.mark.integration, pytest.mark.faults]

LIMIT = 3


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    proc = start_server(port, tmp_path_factory.mktemp("crash-limit-redis"))
    yield f"redis://127.0.0.1:{port}/0"
    proc.kill()
    proc.wait()


class Supervisor(threading.Thread):
    """Keeps ``count`` workers running: a dead one is replaced (and counted)."""

    def __init__(self, factory: WorkerFactory, count: int, env: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.factory = factory
        self.env = env
        self.deaths = 0
        self.stopped = threading.Event()
        self.live: list[Worker] = [self._start() for _ in range(count)]

    def _start(self) -> Worker:
        return self.factory.start(f"sup-{uuid.uuid4().hex[:6]}", wait=False, concurrency=2, **self.env)

    def run(self) -> None:
        while not self.stopped.wait(0.2):
            for w in list(self.live):
                if w.proc.poll() is not None:
                    self.deaths += 1
                    self.live.remove(w)
                    self.live.append(self._start())


def _fleet(url: str, llm: LLMFixture, tmp: Path, **env: str) -> tuple[Supervisor, Dispatcher]:
    redis.Redis.from_url(url).flushdb()
    env = {"REACTQ_MAX_TASK_CRASHES": str(LIMIT), "REACTQ_DUE_GRACE_SECONDS": "1.5",
           "REACTQ_TOOLS": "tests.integration.tools:CRASH_TOOLS", **env}
    sup = Supervisor(WorkerFactory(url, llm, tmp), 2, env)
    for w in sup.live:
        sup.factory.wait_ready(w)
    sup.start()
    settings = Settings(redis_url=url, model="scripted", tools="tests.integration.tools:CRASH_TOOLS", demo_tools=True,
                        openai_api_key="k", openai_base_url=llm.server.base_url)
    return sup, Dispatcher(settings)


def _events(d: Dispatcher, run_id: str) -> list[Any]:
    events = [e for _, e in d.handle(run_id).events(timeout=60)]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1].channel == "done"
    return events


def test_a_tool_that_kills_its_worker_is_answered_with_an_error_after_the_limit(
        own_redis: str, llm: LLMFixture, tmp_path: Path) -> None:
    sup, d = _fleet(own_redis, llm, tmp_path)
    try:
        poison = llm.script(llm.unique("poison tool"), [
            reply_tool_calls([("p1", "die", {"reason": "poison"})]),
            reply_text("the tool kept crashing"),
        ], synthesis=reply_text("reported"))
        calm = llm.script(llm.unique("calm neighbour"), [
            reply_tool_calls([("s1", "slow", {"tag": "calm1", "seconds": 0.0})]),
            reply_tool_calls([("s2", "slow", {"tag": "calm2", "seconds": 0.0})]),
            reply_text("calm done"),
        ], synthesis=reply_text("calm answer"))
        h = d.submit(RunRequest(query=poison))
        other = d.submit(RunRequest(query=calm))
        result = h.result(timeout=120)
        assert other.result(timeout=60)["status"] == "succeeded", "the fleet is fine"
        assert result["status"] == "succeeded" and result["answer"] == "reported"
        assert sup.deaths == LIMIT, "run exactly LIMIT times, then not sent again"
        events = _events(d, h.run_id)
        crashed = [e for e in events if e.channel == "error" and e.data.get("kind") == "tool_crashed"]
        assert len(crashed) == 1 and crashed[0].data["tool_name"] == "die"
        second = llm.requests_for(poison)[-1]["messages"]
        assert "REACTQ_MAX_TASK_CRASHES" in str(second[-1]["content"]), "the LLM is told why"
    finally:
        sup.stopped.set()
        sup.join()
        sup.factory.stop_all()


def test_a_run_step_that_kills_its_worker_ends_the_run_failed_after_the_limit(
        own_redis: str, llm: LLMFixture, tmp_path: Path) -> None:
    run_id = uuid.uuid4().hex
    sup, d = _fleet(own_redis, llm, tmp_path, REACTQ_FAULT_POINTS="in_lease:reactq.iterate",
                    REACTQ_FAULT_ACTION="kill", REACTQ_FAULT_KEY=run_id)
    try:
        q = llm.script(llm.unique("poison step"), [reply_text("never reached")])
        calm = llm.script(llm.unique("calm beside a poison step"), [
            reply_tool_calls([("s1", "slow", {"tag": "calm3", "seconds": 0.0})]),
            reply_text("calm done"),
        ], synthesis=reply_text("calm answer"))
        h = d.submit(RunRequest(query=q), run_id=run_id)
        result = h.result(timeout=120)
        assert result["status"] == "failed"
        assert sup.deaths == LIMIT
        events = _events(d, run_id)
        assert [e.channel for e in events][-2:] == ["error", "done"]
        assert events[-2].data["kind"] == "task_crashed"
        assert llm.requests_for(q) == [], "the step never got past its fault point"
        other = d.submit(RunRequest(query=calm))
        assert other.result(timeout=60)["status"] == "succeeded", "the fleet is fine"
    finally:
        sup.stopped.set()
        sup.join()
        sup.factory.stop_all()
