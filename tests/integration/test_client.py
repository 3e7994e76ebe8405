"""``reactq.Client`` and ``reactq.AsyncClient`` against a real gateway process, the session's
real workers and the scripted LLM server: runs, their streams (resumed across a gateway
restart), cancel, interrupt, DAGs, batches, threads, and the typed errors."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import reactq
from reactq.shared.redisconn import free_port
from tests.integration.conftest import worker_env
from tests.integration.test_dag import script_dag, script_step
from tests.integration.test_gateway import Gateway, start_gateway, stop_gateway
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = pytest.mark.integration
TOKEN = "client-test-token"


@pytest.fixture(scope="module")
def gateway_env(redis_url, llm, workers) -> dict[str, str]:
    return worker_env(redis_url, llm, REACTQ_API_TOKEN=TOKEN, REACTQ_SSE_KEEPALIVE="0.5")


@pytest.fixture(scope="module")
def gateway(gateway_env, tmp_path_factory) -> Iterator[Gateway]:
    gw = start_gateway(gateway_env, tmp_path_factory.mktemp("client-gw") / "gateway.log")
    yield gw
    stop_gateway(gw)


@pytest.fixture
def client(gateway) -> Iterator[reactq.Client]:
    with reactq.Client(gateway.url, api_key=TOKEN, timeout=10) as c:
        yield c


def calculator(llm: Any, text: str) -> str:
    return llm.script(llm.unique(text), [
        reply_tool_calls([("c1", "calculator", {"expression": "17*23"})]),
        reply_text("391"),
    ], synthesis=reply_text("17 × 23 = 391."))


def slow(llm: Any, text: str, *seconds: float) -> str:
    """A run whose turns each call the ``slow`` tool for ``seconds``, then answers."""
    turns = [reply_tool_calls([(f"c{n}", "slow", {"tag": f"client-{n}", "seconds": s})])
             for n, s in enumerate(seconds, 1)]
    return llm.script(llm.unique(text), [*turns, reply_text("slow done")], synthesis=reply_text("all slow done"))


def test_a_run_is_created_streamed_read_and_listed(client, llm):
    q = calculator(llm, "client: what is 17*23?")
    run = client.runs.create(query=q, max_iterations=5)
    # create() reads the run's status after submitting it: a quick run may have ended by then.
    assert run.run_id and run.status in ("queued", "running", "succeeded") and run.created is True
    events = list(client.runs.stream(run.run_id))
    assert [e.data["seq"] for e in events] == list(range(1, len(events) + 1))
    assert all(e.id for e in events) and events[-1].event == "done"
    got = client.runs.get(run.run_id)
    assert got.status == "succeeded" and got.done and got.answer == "17 × 23 = 391."
    # Resume after any event: exactly the rest.
    rest = list(client.runs.stream(run.run_id, last_event_id=events[2].id))
    assert [e.id for e in rest] == [e.id for e in events[3:]]
    listed = client.runs.list(status="succeeded", limit=50)
    assert run.run_id in [r.run_id for r in listed.runs]
    assert all(r.status == "succeeded" for r in listed.runs)


def test_an_idempotency_key_names_one_run(client, llm):
    q = calculator(llm, "client: idempotent")
    key = f"order-{os.getpid()}-{time.time_ns()}"
    first = client.runs.create({"query": q, "idempotency_key": key})
    again = client.runs.create(reactq.RunRequest(query=q, idempotency_key=key))
    assert again.run_id == first.run_id and again.created is False
    assert client.runs.wait(first.run_id, timeout=30).status == "succeeded"


def test_interrupt_then_cancel_a_running_run(client, llm):
    q = slow(llm, "client: cancel me", 5)
    run = client.runs.create(query=q)
    for event in client.runs.stream(run.run_id):
        if event.data.get("type") == "iteration":
            break
    sent = client.runs.interrupt(run.run_id, "use metric units")
    assert len(sent.interrupt_id) == 12
    cancelled = client.runs.cancel(run.run_id)
    assert cancelled.run_id == run.run_id
    assert client.runs.wait(run.run_id, timeout=20).status == "cancelled"
    with pytest.raises(reactq.Conflict) as ended:
        client.runs.interrupt(run.run_id, "too late")
    assert ended.value.status_code == 409 and ended.value.code == "conflict"


def test_errors_are_typed_from_the_error_answer(client, gateway):
    with pytest.raises(reactq.NotFound) as missing:
        client.runs.get("no-such-run")
    assert (missing.value.status_code, missing.value.code) == (404, "not_found")
    assert isinstance(missing.value, reactq.ReactqError) and "no-such-run" in missing.value.message
    with pytest.raises(reactq.NotFound):
        list(client.runs.stream("no-such-run"))
    with pytest.raises(reactq.InvalidRequest) as bad:
        client.runs.create(query="x", max_iterations=0)
    assert bad.value.status_code == 422 and bad.value.code == "validation_error"
    assert bad.value.field == "max_iterations" and isinstance(bad.value, reactq.RequestError)
    with reactq.Client(gateway.url, api_key="wrong") as stranger, pytest.raises(reactq.Unauthorized) as denied:
        stranger.runs.list()
    assert denied.value.status_code == 401
    with pytest.raises(reactq.NotFound):
        client.threads.get("never-used-thread")


class Restarter:
    """Kills the gateway process (kill -9) once, mid-stream, and starts a new one on its port."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log, self.port = env, log, free_port()
        self.gateways = [start_gateway(env, log, port=self.port)]

    @property
    def url(self) -> str:
        return self.gateways[0].url

    def restart_once(self) -> None:
        if len(self.gateways) == 1:
            os.killpg(self.gateways[0].proc.pid, signal.SIGKILL)
            self.gateways[0].proc.wait()  # the stream's connection is now broken
            self.gateways.append(start_gateway(self.env, self.log, port=self.port))

    def stop(self) -> None:
        for g in self.gateways:
            if g.proc.poll() is None:
                stop_gateway(g)


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_stream_resumes_by_last_event_id_when_the_gateway_restarts(flavour, gateway_env, llm, tmp_path):
    """The gateway process is killed mid-stream and started again on the same port: the
    client's iterator reconnects on its own and every event arrives exactly once, in order."""
    gw = Restarter(gateway_env, tmp_path / "gateway.log")
    query = slow(llm, f"client {flavour}: survive a gateway restart", 2, 2)
    seen: list[reactq.dispatcher.api_client.StreamEvent] = []

    def take(event: Any) -> None:
        seen.append(event)
        if len(seen) == 3:  # thinking start/done, the first tool's start
            gw.restart_once()

    async def consume_async() -> str | None:
        async with reactq.AsyncClient(gw.url, api_key=TOKEN, timeout=10) as client:
            run = await client.runs.create(query=query)
            async for event in client.runs.stream(run.run_id):
                take(event)
            return (await client.runs.get(run.run_id)).status

    try:
        if flavour == "sync":
            with reactq.Client(gw.url, api_key=TOKEN, timeout=10) as client:
                run = client.runs.create(query=query)
                for event in client.runs.stream(run.run_id):
                    take(event)
                status = client.runs.get(run.run_id).status
        else:
            status = asyncio.run(consume_async())
    finally:
        gw.stop()
    assert len(gw.gateways) == 2 and status == "succeeded"
    assert [e.data["seq"] for e in seen] == list(range(1, len(seen) + 1))
    assert len(seen) > 3 and seen[-1].event == "done" and seen[-1].data["answer"] == "all slow done"


def test_a_create_sent_while_the_gateway_is_down_is_retried(gateway_env, llm, tmp_path):
    """Connection refused is retried (nothing was sent); the create carries an idempotency
    key, so a retry can never make a second run."""
    port = free_port()
    q = calculator(llm, "client: the gateway comes up late")
    box: dict[str, Any] = {}

    def create() -> None:
        with reactq.Client(f"http://127.0.0.1:{port}", api_key=TOKEN, max_retries=12) as late:
            box["run"] = late.runs.create(query=q)

    t = threading.Thread(target=create)
    t.start()
    time.sleep(0.5)
    gw = start_gateway(gateway_env, tmp_path / "gateway.log", port=port)
    try:
        t.join(30)
        run = box["run"]
        with reactq.Client(gw.url, api_key=TOKEN) as client:
            assert client.runs.wait(run.run_id, timeout=30).answer == "17 × 23 = 391."
            assert [r.run_id for r in client.runs.list(limit=100).runs if r.query == q] == [run.run_id]
    finally:
        stop_gateway(gw)


def test_dags_batches_and_threads_through_the_client(client, llm):
    goal, task = llm.unique("client dag"), llm.unique("client dag: step a")
    script_dag(llm, goal, analysis={"achieved": True, "confidence": 0.9, "reasoning": "complete"},
               synthesis="the DAG's answer")
    script_step(llm, task, [reply_text("a done")], "step a result")
    dag = client.dags.create(goal=goal, steps=[{"id": "a", "task": task}])
    assert dag.dag_id and dag.created is True
    events = list(client.dags.stream(dag.dag_id))
    assert events[-1].event == "done" and events[-1].data["status"] == "succeeded"
    got = client.dags.get(dag.dag_id)
    assert got.status == "succeeded" and got.steps[0]["run_id"] and got.answer == "the DAG's answer"

    q = calculator(llm, "client batch: a line")
    batch = client.batches.create([{"query": q, "id": "one"}], concurrency=2)
    deadline = time.monotonic() + 30
    while (view := client.batches.get(batch.batch_id)).status == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert view.succeeded == 1 and view.total == 1
    try:  # it has ended: a 409, or a no-op answering its final status (one rule for every object)
        after = client.batches.cancel(batch.batch_id)
        assert after.status != "running"
    except reactq.Conflict as exc:
        assert exc.status_code == 409
    assert client.batches.get(batch.batch_id, results=True).results[0]["status"] == "succeeded"

    thread_id = f"client-thread-{time.time_ns()}"
    first = client.runs.create(query=calculator(llm, "client thread: first"), thread_id=thread_id)
    client.runs.wait(first.run_id, timeout=30)
    thread = client.threads.get(thread_id)
    assert [r.run_id for r in thread.runs] == [first.run_id] and thread.active_run is None


def test_the_async_client_does_the_same_with_await(gateway, llm):
    q = calculator(llm, "async client: what is 17*23?")
    slow_q = slow(llm, "async client: cancel me", 5)

    async def main() -> tuple[list[reactq.Run], list[Any], str]:
        async with reactq.AsyncClient(gateway.url, api_key=TOKEN, timeout=10) as client:
            run = await client.runs.create(query=q)
            events = [e async for e in client.runs.stream(run.run_id)]
            done = await client.runs.get(run.run_id)
            held = await client.runs.create(query=slow_q)
            async for e in client.runs.stream(held.run_id):
                if e.data.get("type") == "iteration":
                    break
            await client.runs.cancel(held.run_id)
            ended = await client.runs.wait(held.run_id, timeout=20)
            try:
                await client.runs.get("no-such-run")
            except reactq.NotFound as exc:
                code = exc.code
            return [done, ended], events, code

    (done, ended), events, code = asyncio.run(main())
    assert done.status == "succeeded" and done.answer == "17 × 23 = 391."
    assert [e.data["seq"] for e in events] == list(range(1, len(events) + 1)) and events[-1].event == "done"
    assert ended.status == "cancelled" and code == "not_found"


def test_result_says_no_worker_took_the_run(settings, backend, redis_url):
    """A run on a broker no worker consumes: ``result()`` raises NoWorker instead of
    waiting forever (its default timeout is finite too)."""
    from reactq.shared.settings import Settings

    url, env = backend.isolated(7)
    lonely = reactq.Dispatcher(Settings(**{**settings.model_dump(), "redis_url": url, **backend.settings(env)}))
    handle = lonely.submit(reactq.RunRequest(query="nobody takes this"))
    started = time.monotonic()
    with pytest.raises(reactq.NoWorker, match="no worker answers") as raised:
        handle.result(pickup_check=0.5)
    assert isinstance(raised.value, TimeoutError) and time.monotonic() - started < 10
    with pytest.raises(TimeoutError):
        handle.result(timeout=0.3, pickup_check=None)
