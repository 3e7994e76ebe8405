"""On the Redis broker a step's commit pushes the messages of what comes next itself, in its
own script: the tasks are queued if and only if the commit wins, and a worker that dies right
after its commit has nothing left to send."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from reactq.dispatcher.client import Dispatcher
from reactq.shared.engine.state import RunState
from reactq.shared.redisconn import free_port, start_server
from reactq.shared.requests import RunRequest
from reactq.shared.settings import Settings
from reactq.shared.stores.runs import RunStore
from tests.integration.conftest import LLMFixture, WorkerFactory
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = pytest.mark.integration

LEASE = 1.5
#: Far longer than the test waits: only the message the commit pushed can resume the run.
GRACE = 300.0


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[str]:
    """A server of its own: the test owns the broker's queues and kills a worker."""
    port = free_port()
    proc = start_server(port, tmp_path / "redis")
    yield f"redis://127.0.0.1:{port}/0"
    proc.kill()
    proc.wait()


def test_a_commit_pushes_its_messages_only_when_it_wins(own_redis: str) -> None:
    r = redis.Redis.from_url(own_redis)
    store = RunStore(r)
    run_id = uuid.uuid4().hex
    store.create(run_id, RunRequest(query="q").model_dump(mode="json"))
    state = RunState(run_id=run_id, query="q", model="scripted", mode="json", max_iterations=5)
    assert not store.commit(run_id, state, 5, [], pushes=[("bench-q", "stale")])
    assert r.llen("bench-q") == 0
    assert store.commit(run_id, state, 0, [], pushes=[("bench-q", "one"), ("bench-q2", "two")])
    assert r.lrange("bench-q", 0, -1) == [b"one"] and r.lrange("bench-q2", 0, -1) == [b"two"]


def test_a_tool_calls_close_pushes_the_fan_in_once_the_turn_is_complete(own_redis: str) -> None:
    from reactq.shared.stores.calls import CallLedger

    r = redis.Redis.from_url(own_redis)
    store = RunStore(r)
    run_id = uuid.uuid4().hex
    store.create(run_id, RunRequest(query="q").model_dump(mode="json"))
    calls = CallLedger(store)
    assert calls.close(run_id, 0, "c1", None, 2, push=("bench-fan-in", "early")) == (False, 1)
    assert r.llen("bench-fan-in") == 0
    assert calls.close(run_id, 0, "c2", None, 2, push=("bench-fan-in", "last")) == (False, 2)
    assert r.lrange("bench-fan-in", 0, -1) == [b"last"]


def test_a_worker_killed_right_after_its_commit_leaves_the_next_tasks_queued(
        own_redis: str, llm: LLMFixture, tmp_path: Path) -> None:
    r = redis.Redis.from_url(own_redis)
    marker = tmp_path / "stopped"
    factory = WorkerFactory(own_redis, llm, tmp_path)
    env = {"REACTQ_LEASE_SECONDS": str(LEASE), "REACTQ_DUE_GRACE_SECONDS": str(GRACE)}
    try:
        # One slot; stopped (then killed) right after the commit that made the tool call due
        # (the run's second: the first one is its tool selection, which the task goes on from).
        a = factory.start("committed", concurrency=1, REACTQ_FAULT_POINTS="after_commit",
                          REACTQ_FAULT_FILE=str(marker), REACTQ_FAULT_SKIP="1", **env)
        d = Dispatcher(Settings(redis_url=own_redis, model="scripted", tools="tests.integration.tools:TOOLS",
                                openai_api_key="k", openai_base_url=llm.server.base_url,
                                lease_seconds=LEASE, due_grace_seconds=GRACE))
        tag = uuid.uuid4().hex[:8]
        q = llm.script(llm.unique("killed after its commit"), [
            reply_tool_calls([("c1", "slow", {"tag": tag, "seconds": 0.0})]),
            reply_text("the loop's answer"),
        ], synthesis=reply_text("carried"))
        h = d.submit(RunRequest(query=q))
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert time.monotonic() < deadline, "the worker did not stop after its commit"
            time.sleep(0.05)
        a.kill()
        killed = time.monotonic()
        factory.start("next", concurrency=2, **env)
        # The watchdog would resend only after lease + grace (301.5 s): the run goes on at once
        # because the tool call's message was queued by the commit itself.
        result = h.result(timeout=40)
        print(f"\nfinished {time.monotonic() - killed:.2f} s after the kill")
        assert result["status"] == "succeeded" and result["answer"] == "carried"
        runs: list[Any] = [json.loads(x) for x in r.lrange("reactq-test:toolruns", 0, -1)]
        assert [x["tag"] for x in runs].count(tag) == 1, "the tool ran once"
        events = [e for _, e in d.handle(h.run_id).events(timeout=30)]
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert [e.channel for e in events].count("done") == 1
    finally:
        factory.stop_all()
