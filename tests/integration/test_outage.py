"""Issue 10 item 4: workers ride out an outage of Redis (store and broker at once); runs in
flight finish after it; an SSE response that loses Redis ends cleanly and a reconnect with
``Last-Event-ID`` resumes exactly where it left off.

The Redis here is the test's own, with an append-only file (what the embedded Valkey now
runs with), stopped and started again on the same port and directory. On the old code a
worker exited during the outage (kombu error while acknowledging) and the SSE stream was cut
mid-response.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import redis

from reactq.dispatcher.client import Dispatcher
from reactq.shared.keys import Keys
from reactq.shared.redisconn import free_port, start_server
from reactq.shared.requests import RunRequest
from reactq.shared.settings import Settings
from tests.integration.conftest import ROOT, Worker, WorkerFactory, worker_env
from tests.integration.test_gateway import read_sse, start_gateway, stop_gateway  # noqa: F401
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = [pytest.mark.integration, pytest.mark.faults]

OUTAGE = float(os.environ.get("REACTQ_TEST_OUTAGE_SECONDS", "15"))


def frames_of(lines: Iterator[str], stop_after: int | None = None) -> list[dict[str, Any]]:
    """SSE frames from an ``iter_lines`` iterator (resumable: read some, then the rest)."""
    frames: list[dict[str, Any]] = []
    cur: dict[str, str] = {}
    for line in lines:
        if line == "":
            if "data" in cur:
                frames.append({"id": cur.get("id"), "event": cur.get("event"), "data": json.loads(cur["data"])})
                if stop_after is not None and len(frames) >= stop_after:
                    return frames
            cur = {}
        elif not line.startswith(":"):
            key, _, value = line.partition(":")
            cur[key] = value[1:] if value.startswith(" ") else value
    return frames


class Server:
    """A Redis-compatible server with AOF that can be stopped and started again."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.dir = tmp / "redis-aof"
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = start_server(self.port, self.dir, persist=True)

    def stop(self) -> None:
        """SIGTERM: the server flushes its AOF (a kill -9 could lose the last second)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, getattr(signal, os.environ.get("REACTQ_TEST_KILL", "SIGTERM")))
            self.proc.wait(10)


@pytest.fixture
def aof_redis(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path)
    srv.start()
    yield srv
    srv.stop()


class RealWorkers(WorkerFactory):
    """Workers started with the command line ``reactq worker`` runs (mingle, gossip and all),
    not the trimmed one of the other tests."""

    def start(self, name: str | None = None, *, queues: str = "reactq.runs,reactq.tools",
              concurrency: int = 2, wait: bool = True, **env: str) -> Worker:
        from reactq.dispatcher.local.workers import worker_command

        name = name or f"real-{len(self.started)}"
        log = self.tmp / f"{name}.log"
        cmd = worker_command(queues=queues, concurrency=concurrency, name=f"{name}@%h")
        proc = subprocess.Popen(cmd, cwd=ROOT, env=worker_env(self.redis_url, self.llm, **env),
                                stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
        worker = Worker(name, proc, log)
        self.started.append(worker)
        if wait:
            self.wait_ready(worker)
        return worker


@pytest.mark.parametrize("down", ["redis", "broker"])
def test_workers_ride_out_an_outage_and_runs_in_flight_finish(aof_redis, llm, tmp_path, down):
    """``redis``: one server is store and broker (the default) and goes away; ``broker``: the
    broker is a server of its own and goes away while the store stays up."""
    broker = Server(tmp_path / "broker")
    broker.start()
    env = {"REACTQ_BROKER_URL": broker.url} if down == "broker" else {}
    factory = RealWorkers(aof_redis.url, llm, tmp_path)
    outage = broker if down == "broker" else aof_redis
    try:
        workers = [factory.start("out-a", wait=False, **env), factory.start("out-b", wait=False, **env)]
        for w in workers:
            factory.wait_ready(w)
        d = Dispatcher(Settings(redis_url=aof_redis.url, model="scripted", tools="tests.integration.tools:TOOLS",
                                openai_api_key="test-key", openai_base_url=llm.server.base_url,
                                broker_url=env.get("REACTQ_BROKER_URL")))
        queries = []
        for n in range(4):
            # The LLM answers while Redis is down: the step's commit meets the outage.
            q = llm.script(llm.unique(f"outage {n}"), [
                reply_tool_calls([(f"c{n}", "add", {"a": n, "b": 1})]).with_options(delay=1.0 + n),
                reply_text(f"done {n}")])
            queries.append(q)
        handles = [d.submit(RunRequest(query=q)) for q in queries]
        time.sleep(0.8)
        outage.stop()
        time.sleep(OUTAGE)
        for w in workers:
            assert w.proc.poll() is None, f"{w.name} exited during the outage:\n{w.log.read_text()[-3000:]}"
        outage.start()
        for h in handles:
            assert h.result(timeout=120)["status"] == "succeeded"
            events = [e for _, e in h.events(timeout=30)]
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            assert events[-1].channel == "done"
        for w in workers:
            assert w.proc.poll() is None, f"{w.name} exited after the outage"
    finally:
        factory.stop_all()
        broker.stop()


def test_an_sse_stream_that_loses_redis_ends_cleanly_and_resumes_with_last_event_id(aof_redis, llm, tmp_path):
    factory = WorkerFactory(aof_redis.url, llm, tmp_path)
    gw = None
    try:
        factory.start("sse-out", concurrency=2)
        env = worker_env(aof_redis.url, llm, REACTQ_SSE_KEEPALIVE="1")
        gw = start_gateway(env, tmp_path / "gateway.log", via_cli=False)
        q = llm.script(llm.unique("outage: sse"), [
            reply_tool_calls([("c1", "add", {"a": 1, "b": 2})]),
            reply_text("three").with_options(delay=6)])
        created = httpx2.post(f"{gw.url}/v1/runs", json={"query": q}, timeout=30).json()
        with httpx2.Client(base_url=gw.url, timeout=60) as client:
            with client.stream("GET", created["events_url"]) as res:
                lines = res.iter_lines()
                first = frames_of(lines, stop_after=3)
                aof_redis.stop()
                rest = frames_of(lines)  # must end, not raise (a cut stream raises here)
            seen = first + rest
            assert seen[-1]["event"] != "done"  # the run is still in its slow LLM call
            time.sleep(2)
            aof_redis.start()
            with client.stream("GET", created["events_url"], headers={"Last-Event-ID": seen[-1]["id"]}) as res:
                assert res.status_code == 200
                after, _ = read_sse(res)
        frames = seen + after
        assert frames[-1]["event"] == "done" and frames[-1]["data"]["status"] == "succeeded"
        ids = [f["id"] for f in frames]
        assert len(ids) == len(set(ids)), "an event came twice"
        r = redis.Redis.from_url(aof_redis.url)
        stored = [i.decode() for i, _ in r.xrange(Keys().run_events(created['run_id']))]
        assert ids == stored, "the resumed stream is not exactly the stored one"
    finally:
        if gw is not None:
            stop_gateway(gw)
        factory.stop_all()
