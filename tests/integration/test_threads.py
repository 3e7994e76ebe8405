"""Threads and double texting on real workers (DESIGN "Threads and double texting", issue 17).

Every LLM request of every test here is also checked by the autouse pairing validator in
``conftest.py``: no assistant tool call without its result, in any strategy.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from typing import Any

import pytest
from reactq.dispatcher.client import Dispatcher
from reactq.dispatcher.threads import ThreadBusy, thread_view
from reactq.shared.engine import prompts as P
from reactq.shared.requests import RunRequest

from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = pytest.mark.integration


def _tid() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def _wait(predicate: Any, timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _submit(d: Dispatcher, q: str, tid: str, strategy: str = "inject") -> Any:
    return d.submit(RunRequest(query=q, thread_id=tid, multitask_strategy=strategy,
                               completion_check=False))


def _events(d: Dispatcher, run_id: str) -> list[Any]:
    return [e for _, e in d.handle(run_id).events(timeout=60)]


def _loop_requests(llm: Any, query: str) -> list[dict[str, Any]]:
    """Non-streamed (loop) requests whose last registered-looking user turn is ``query``."""
    out = []
    for rec in llm.server.requests:
        body = rec.body
        if body.get("stream"):
            continue
        users = [m for m in body["messages"] if m.get("role") == "user" and isinstance(m.get("content"), str)]
        if any(m["content"] == query for m in users):
            out.append(body)
    return out


def _first_turn(llm: Any, query: str) -> dict[str, Any]:
    """The run's first loop request: the one that ends with ``query`` itself."""
    (body,) = [b for b in _loop_requests(llm, query) if b["messages"][-1].get("content") == query]
    return body


def _synthesis_requests(llm: Any, query: str) -> list[dict[str, Any]]:
    return [r.body for r in llm.server.requests if r.body.get("stream")
            and query in r.body["messages"][-1]["content"]]


def _mid_tool(d: Dispatcher, run_id: str) -> None:
    """Wait until the run's tool call has started (its ``iteration start`` event)."""
    def started() -> bool:
        return any(e.channel == "step" and e.data.get("type") == "iteration" and e.data.get("status") == "start"
                   for _, e in d.handle(run_id).events(until_done=False, block_ms=100))
    _wait(started, what="the tool call to start")


# ----------------------------------------------------------------------------- history


def test_a_second_question_on_a_thread_is_answered_from_the_first(workers, dispatcher, llm):
    """The second run starts from the first run's query and answer (not its tool trace); its
    synthesis gets the seed's "Previous conversation" block; the thread lists both runs."""
    tid = _tid()
    q1 = llm.script(llm.unique("my parcel number is 17*23, work it out"), [
        reply_tool_calls([("c1", "calculator", {"expression": "17*23"})]),
        reply_text("It is 391."),
    ], synthesis=reply_text("Your parcel number is 391."))
    q2 = llm.script(llm.unique("and what was my parcel number plus one?"), [
        reply_text("391 + 1 = 392"),
    ], synthesis=reply_text("392"))
    h1 = _submit(dispatcher, q1, tid)
    assert h1.result(timeout=30)["answer"] == "Your parcel number is 391."
    h2 = _submit(dispatcher, q2, tid)
    assert h2.created and h2.run_id != h1.run_id
    assert h2.result(timeout=30)["answer"] == "392"

    first_turn = _first_turn(llm, q2)
    roles = [(m["role"], m.get("content")) for m in first_turn["messages"][1:]]
    assert roles == [("user", q1), ("assistant", "Your parcel number is 391."), ("user", q2)], \
        "the thread's history is the earlier query and final answer, no tool messages"
    (synth,) = _synthesis_requests(llm, q2)
    text = synth["messages"][-1]["content"]
    assert f"Previous conversation:\nUser: {q1}\nAssistant: Your parcel number is 391.\n\nCurrent request: {q2}" in text

    view = thread_view(dispatcher, tid)
    assert view["active_run"] is None
    assert [(r["run_id"], r["status"], r["query"]) for r in view["runs"]] == [
        (h1.run_id, "succeeded", q1), (h2.run_id, "succeeded", q2)]
    assert [m["role"] for m in view["messages"]] == ["user", "assistant"] * 2
    ttl = dispatcher.redis.ttl(dispatcher.keys.thread(tid))
    assert 0 < ttl <= dispatcher.settings.run_ttl_seconds, "an idle thread expires like a run"
    assert "{" + tid + "}" in dispatcher.keys.thread_history(tid), "literal-brace hash tag"


# ----------------------------------------------------------------------------- strategies


def _first_run_mid_tool(dispatcher: Dispatcher, llm: Any, tid: str, seconds: float = 3.0) -> tuple[str, Any]:
    q1 = llm.script(llm.unique("look this up slowly"), [
        reply_tool_calls([("s1", "slow", {"tag": f"first-{tid}", "seconds": seconds})]),
        reply_text("looked it up"),
    ], synthesis=reply_text("first answer"))
    h1 = _submit(dispatcher, q1, tid)
    _mid_tool(dispatcher, h1.run_id)
    return q1, h1


def test_inject_puts_the_message_into_the_active_run(workers, dispatcher, llm):
    tid = _tid()
    q1, h1 = _first_run_mid_tool(dispatcher, llm, tid, seconds=1.5)
    q2 = llm.unique("also check the other thing")
    h2 = _submit(dispatcher, q2, tid, "inject")
    assert h2.injected and h2.run_id == h1.run_id and h2.interrupt_id
    events = _events(dispatcher, h1.run_id)
    assert h1.result(timeout=30)["status"] == "succeeded"
    injects = [e.data for e in events if e.channel == "inject"]
    assert [(i["content"], i["id"]) for i in injects] == [(q2, h2.interrupt_id)]
    second = [b for b in _loop_requests(llm, q1) if any(m["role"] == "tool" for m in b["messages"])]
    msgs = second[0]["messages"]
    tool_at = next(i for i, m in enumerate(msgs) if m["role"] == "tool")
    assert msgs[tool_at + 1]["content"].startswith(f"[USER INTERRUPT]: {q2}"), \
        "the follow-up comes right after the tool result, never between call and result"
    view = thread_view(dispatcher, tid)
    assert [r["run_id"] for r in view["runs"]] == [h1.run_id], "no run was made"
    assert q2 in view["messages"][0]["content"], "the injected follow-up is part of the turn"


def test_enqueue_starts_the_next_run_when_the_active_one_ends(workers, dispatcher, llm):
    tid = _tid()
    q1, h1 = _first_run_mid_tool(dispatcher, llm, tid, seconds=1.5)
    q2 = llm.script(llm.unique("then do the second thing"), [reply_text("second done")],
                    synthesis=reply_text("second answer"))
    q3 = llm.script(llm.unique("and the third thing"), [reply_text("third done")],
                    synthesis=reply_text("third answer"))
    h2 = _submit(dispatcher, q2, tid, "enqueue")
    h3 = _submit(dispatcher, q3, tid, "enqueue")
    assert h2.created and not h2.injected
    assert h2.status()["status"] == "queued" and h3.status()["status"] == "queued"
    assert thread_view(dispatcher, tid)["active_run"] == h1.run_id
    r1, r2, r3 = h1.result(timeout=30), h2.result(timeout=30), h3.result(timeout=30)
    assert (r1["status"], r2["status"], r3["status"]) == ("succeeded",) * 3
    s1 = dispatcher.store.load(h1.run_id).state
    s2 = dispatcher.store.load(h2.run_id).state
    assert s2.started_at >= s1.ended_at, "the enqueued run started after the active one ended"
    first_of_2 = _first_turn(llm, q2)
    assert [m.get("content") for m in first_of_2["messages"][1:]] == [q1, "first answer", q2]
    first_of_3 = _first_turn(llm, q3)
    assert [m.get("content") for m in first_of_3["messages"][1:]] == [
        q1, "first answer", q2, "second answer", q3], "FIFO, each with the answers before it"


def test_reject_refuses_while_the_thread_is_busy(workers, dispatcher, llm):
    tid = _tid()
    _, h1 = _first_run_mid_tool(dispatcher, llm, tid, seconds=1.0)
    with pytest.raises(ThreadBusy) as err:
        _submit(dispatcher, llm.unique("not now"), tid, "reject")
    assert err.value.active_run == h1.run_id and h1.run_id in str(err.value)
    assert h1.result(timeout=30)["status"] == "succeeded"
    assert [r["run_id"] for r in thread_view(dispatcher, tid)["runs"]] == [h1.run_id], "nothing enqueued"


@pytest.mark.parametrize("strategy", ["interrupt", "rollback"])
def test_interrupt_and_rollback_stop_the_active_run_mid_tool(strategy, workers, dispatcher, llm):
    tid = _tid()
    q1, h1 = _first_run_mid_tool(dispatcher, llm, tid, seconds=4.0)
    q2 = llm.script(llm.unique(f"forget that, {strategy} please"), [reply_text("ok")],
                    synthesis=reply_text("new answer"))
    h2 = _submit(dispatcher, q2, tid, strategy)
    assert h2.created
    events = _events(dispatcher, h1.run_id)
    r1 = h1.result(timeout=30)
    assert r1["status"] == "cancelled"
    tool_ended = _wait(lambda: _tool_end(dispatcher, f"first-{tid}"), what="the slow tool to finish")
    assert dispatcher.store.load(h1.run_id).state.ended_at < tool_ended, \
        "the run stopped at the next step boundary, without waiting for its tool"
    error = next(e.data for e in events if e.channel == "error")
    assert (error["kind"], error["strategy"]) == ("interrupted", strategy)
    assert events[-1].channel == "done" and events[-1].data["status"] == "cancelled"
    # The stopped run's own history is valid: its open call is answered as *interrupted*.
    s1 = dispatcher.store.load(h1.run_id).state
    tool_msgs = [m for m in s1.messages if m.role == "tool"]
    assert [(m.tool_call_id, m.content) for m in tool_msgs] == [("s1", P.INTERRUPTED_OBSERVATION)]
    assert not any(s.tool_call_id == "s1" for s in s1.steps), "not recorded as run"

    assert h2.result(timeout=30)["answer"] == "new answer"
    first_of_2 = _first_turn(llm, q2)
    history = [(m["role"], m.get("content")) for m in first_of_2["messages"][1:-1]]
    if strategy == "interrupt":
        assert history[0] == ("user", q1)
        assert history[1][0] == "assistant" and "interrupted" in history[1][1] and "slow" in history[1][1]
    else:
        assert history == [], "rollback leaves nothing of the stopped run"
    view = thread_view(dispatcher, tid)
    assert [(r["run_id"], r["status"]) for r in view["runs"]] == [(h1.run_id, "cancelled"),
                                                                  (h2.run_id, "succeeded")]


def _tool_end(d: Dispatcher, tag: str) -> float | None:
    import json

    for raw in d.redis.lrange("reactq-test:toolruns", 0, -1):
        rec = json.loads(raw)
        if rec["tag"] == tag:
            return float(rec["ended"])
    return None


# ----------------------------------------------------------------------------- races


@pytest.mark.parametrize("strategy", ["inject", "reject"])
def test_two_clients_racing_on_one_thread_get_one_active_run(strategy, workers, settings, llm):
    q = llm.script(llm.unique("race"), [reply_text("won", delay=1.0)], synthesis=reply_text("raced"))
    for _ in range(3):
        tid = _tid()
        clients = [Dispatcher(settings), Dispatcher(settings)]
        for c in clients:
            c.catalog()  # warm: both submit at the barrier
        barrier = threading.Barrier(2)
        outcomes: list[Any] = [None, None]

        def go(i: int, barrier: threading.Barrier = barrier, outcomes: list[Any] = outcomes,
               clients: list[Dispatcher] = clients, tid: str = tid) -> None:
            barrier.wait()
            try:
                outcomes[i] = _submit(clients[i], q, tid, strategy)
            except ThreadBusy as exc:
                outcomes[i] = exc

        ts = [threading.Thread(target=go, args=(i,)) for i in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(20)
        created = [o for o in outcomes if not isinstance(o, ThreadBusy) and o.created]
        assert len(created) == 1, outcomes
        other = next(o for o in outcomes if o is not created[0])
        if strategy == "inject":
            assert other.injected and other.run_id == created[0].run_id
        else:
            assert isinstance(other, ThreadBusy) and other.active_run == created[0].run_id
        assert [r["run_id"] for r in thread_view(clients[0], tid)["runs"]] == [created[0].run_id]
        assert created[0].result(timeout=30)["status"] == "succeeded"


# ----------------------------------------------------------------------------- HTTP


def test_http_thread_routes(workers, redis_url, llm, tmp_path):
    import httpx

    from tests.integration.conftest import worker_env
    from tests.integration.test_gateway import start_gateway, stop_gateway

    gw = start_gateway(worker_env(redis_url, llm), tmp_path / "gw.log", via_cli=False)
    try:
        tid = _tid()
        q1 = llm.script(llm.unique("http thread first"), [
            reply_tool_calls([("h1", "slow", {"tag": "http-thread", "seconds": 1.5})]),
            reply_text("done")], synthesis=reply_text("http first answer"))
        c = httpx.Client(base_url=gw.url, timeout=10)
        first = c.post("/v1/runs", json={"query": q1, "thread_id": tid, "completion_check": False})
        assert first.status_code == 202
        rid = first.json()["run_id"]
        d = Dispatcher(_settings(redis_url, llm))
        _mid_tool(d, rid)
        busy = c.post("/v1/runs", json={"query": "x", "thread_id": tid, "multitask_strategy": "reject"})
        assert busy.status_code == 409 and busy.json()["active_run"] == rid and rid in busy.json()["detail"]
        inj = c.post("/v1/runs", json={"query": "and this", "thread_id": tid})
        assert inj.status_code == 202
        assert inj.json()["run_id"] == rid and inj.json()["injected"] is True and inj.json()["interrupt_id"]
        bad = c.post("/v1/runs", json={"query": "x", "thread_id": "no{braces}"})
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-1] == "thread_id"
        bad = c.post("/v1/runs", json={"query": "x", "thread_id": tid, "multitask_strategy": "later"})
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-1] == "multitask_strategy"
        d.handle(rid).result(timeout=30)
        view = c.get(f"/v1/threads/{tid}").json()
        assert view["thread_id"] == tid and view["active_run"] is None
        assert [(r["run_id"], r["status"], r["query"]) for r in view["runs"]] == [(rid, "succeeded", q1)]
        assert set(view["runs"][0]) == {"run_id", "status", "query", "created_at"}
        assert c.get("/v1/threads/never-used").status_code == 404
        assert c.get("/v1/threads/bad{id}").status_code == 422
    finally:
        stop_gateway(gw)


def _settings(redis_url: str, llm: Any) -> Any:
    from reactq.shared.settings import Settings

    return Settings(redis_url=redis_url, model="scripted", tools="tests.integration.tools:TOOLS",
                    openai_api_key="test-key", openai_base_url=llm.server.base_url)


# ----------------------------------------------------------------------------- kill -9


@pytest.fixture
def own_db(redis_url, llm, tmp_path):
    """A Redis database of its own (broker and store): only this test's workers see its tasks."""
    from reactq.shared.settings import Settings

    from tests.integration.conftest import WorkerFactory

    url = redis_url.rsplit("/", 1)[0] + f"/{next(_own_dbs)}"
    import redis

    redis.Redis.from_url(url).flushdb()
    factory = WorkerFactory(url, llm, tmp_path)
    settings = Settings(redis_url=url, model="scripted", tools="tests.integration.tools:TOOLS",
                        openai_api_key="k", openai_base_url=llm.server.base_url)
    yield Dispatcher(settings), factory
    factory.stop_all()


_own_dbs = itertools.cycle([14, 15])  # 1.. crash tests, 12-13 DAG tests


@pytest.mark.faults
@pytest.mark.parametrize("when", ["before_the_stop", "right_after_the_submission"])
def test_kill_9_during_an_interrupt_leaves_a_valid_thread(when, own_db, llm):
    """The only worker is killed mid-tool — before the interrupt is sent, or just after it
    (while the stop may be in flight: before, during or after its commit). A fresh worker
    finishes the job: the old run ends ``cancelled`` with its call answered as interrupted,
    the new run runs once from a valid history, every event once."""
    d, factory = own_db
    first = factory.start("kill-a")
    tid = _tid()
    q1 = llm.script(llm.unique("slow work to be interrupted"), [
        reply_tool_calls([("k1", "slow", {"tag": f"kill-{tid}", "seconds": 2.0})]),
        reply_text("slow done")], synthesis=reply_text("never"))
    q2 = llm.script(llm.unique("new direction after the crash"), [reply_text("fine")],
                    synthesis=reply_text("after the crash"))
    h1 = _submit(d, q1, tid)
    _mid_tool(d, h1.run_id)
    if when == "before_the_stop":
        first.kill()
        h2 = _submit(d, q2, tid, "interrupt")
    else:
        h2 = _submit(d, q2, tid, "interrupt")
        first.kill()
    factory.start("kill-b")
    assert h1.result(timeout=60)["status"] == "cancelled"
    assert h2.result(timeout=60)["answer"] == "after the crash"
    for rid in (h1.run_id, h2.run_id):
        events = [e for _, e in d.handle(rid).events(timeout=30)]
        assert [e.seq for e in events] == list(range(1, len(events) + 1)), "every seq once, in order"
        assert [e.channel for e in events].count("done") == 1
    s1 = d.store.load(h1.run_id).state
    assert [(m.tool_call_id, m.content) for m in s1.messages if m.role == "tool"] == [
        ("k1", P.INTERRUPTED_OBSERVATION)]
    first_of_2 = _first_turn(llm, q2)
    assert [m["role"] for m in first_of_2["messages"][1:]] == ["user", "assistant", "user"]
    assert "interrupted" in first_of_2["messages"][2]["content"]
    view = thread_view(d, tid)
    assert view["active_run"] is None
    assert [(r["run_id"], r["status"]) for r in view["runs"]] == [(h1.run_id, "cancelled"),
                                                                  (h2.run_id, "succeeded")]
    assert len(view["messages"]) == 4, "each run's turns recorded once"


def _ended_but_not_released(d: Dispatcher, tid: str, answer: str) -> str:
    """A thread whose active run has ended but was never released: what a worker killed
    between the run's final commit and the release leaves behind."""
    from reactq.dispatcher.threads import thread_store
    from reactq.shared.engine.state import RunState

    rid = uuid.uuid4().hex
    q = f"ghost question {rid[:6]}"
    assert thread_store(d).submit(tid, rid, "inject", q).kind == "start"
    d.store.create(rid, RunRequest(query=q, thread_id=tid).model_dump(mode="json"))
    state = RunState(run_id=rid, query=q, model="scripted", mode="native", max_iterations=5,
                     thread_id=tid, phase="done", status="succeeded", final_answer=answer)
    assert d.store.commit(rid, state, 0, [])
    return rid


def test_a_redelivered_task_hands_on_a_thread_its_crashed_worker_did_not(workers, dispatcher, llm):
    tid = _tid()
    from reactq.dispatcher.threads import thread_store

    ghost = _ended_but_not_released(dispatcher, tid, "ghost answer")
    ts = thread_store(dispatcher)
    dispatcher.send("reactq.iterate", [ghost, None])  # what the lease watchdog resends
    _wait(lambda: ts.active(tid) is None, what="the redelivered task to release the thread")
    assert [m.content for m in ts.history(tid)][1:] == ["ghost answer"]
    dispatcher.send("reactq.iterate", [ghost, None])
    time.sleep(0.5)
    assert len(ts.history(tid)) == 2, "a second redelivery adds nothing"


def test_the_next_submission_repairs_a_thread_left_active_by_an_ended_run(workers, dispatcher, llm):
    tid = _tid()
    _ended_but_not_released(dispatcher, tid, "ghost answer 2")
    q2 = llm.script(llm.unique("after the ghost"), [reply_text("ok")], synthesis=reply_text("b2"))
    h2 = _submit(dispatcher, q2, tid, "reject")  # would be refused if the ended run still held the thread
    assert h2.created and h2.result(timeout=30)["status"] == "succeeded"
    assert [m.get("content") for m in _first_turn(llm, q2)["messages"][1:]][1:] == ["ghost answer 2", q2]


def test_a_message_injected_too_late_for_the_answer_becomes_the_next_run(workers, dispatcher, llm):
    """``inject`` while the active run already streams its answer: the seed's run cannot read
    it (``pending_injections``), so the thread runs it next, with that answer in its history."""
    tid = _tid()
    q1 = llm.script(llm.unique("answer slowly"), [reply_text("draft")],
                    synthesis=reply_text("a long first answer", chunk_delay=0.3))
    h1 = _submit(dispatcher, q1, tid)

    def streaming() -> bool:
        return any(e.channel == "answer" and e.data.get("status") == "delta"
                   for _, e in dispatcher.handle(h1.run_id).events(until_done=False, block_ms=100))
    _wait(streaming, what="the answer to stream")
    late = llm.script(llm.unique("one more thing"), [reply_text("late ok")], synthesis=reply_text("late answer"))
    h2 = _submit(dispatcher, late, tid, "inject")
    assert h2.injected and h2.run_id == h1.run_id
    events = _events(dispatcher, h1.run_id)
    assert events[-1].data.get("pending_injections") == [late]
    nxt = _wait(lambda: len(thread_view(dispatcher, tid)["runs"]) == 2 and thread_view(dispatcher, tid)["runs"][1],
                what="the follow-up run")
    assert nxt["query"] == late
    assert dispatcher.handle(nxt["run_id"]).result(timeout=30)["answer"] == "late answer"
    assert [m.get("content") for m in _first_turn(llm, late)["messages"][1:]] == [
        q1, "a long first answer", late]


def test_the_thread_scripts_decide_every_strategy(r):
    """The Lua decisions on a real Redis, one by one (no workers): queue order, stop marks,
    idempotent release, TTL only once idle."""
    from reactq.shared.models import ChatMessage
    from reactq.shared.threads import Decision, ThreadStore

    ts = ThreadStore(r, ttl_seconds=600)
    tid = _tid()
    assert ts.submit(tid, "a", "reject", "qa").kind == "start"
    assert r.ttl(ts.keys.thread(tid)) == -1, "no TTL while a run is active"
    assert (ts.submit(tid, "x", "inject", "qx").kind, ts.submit(tid, "x", "reject", "qx").kind) == ("inject", "reject")
    assert ts.submit(tid, "b", "enqueue", "qb").kind == "enqueued"
    assert ts.submit(tid, "c", "interrupt", "qc") == Decision("stopping", "a")
    assert ts.submit(tid, "c2", "enqueue", "q") == Decision("enqueued", "a")
    assert ts.stop_kind(tid, "a") == "interrupt"
    assert ts.submit(tid, "d", "inject", "qd").kind == "enqueued", "a run being stopped never reads an inject"
    assert [x.decode() for x in r.lrange(ts.keys.thread_queue(tid), 0, -1)] == ["c", "b", "c2", "d"]
    turn = [ChatMessage(role="user", content="qa"), ChatMessage(role="assistant", content="A")]
    assert ts.release(tid, "a", turn, [("f1", "late 1"), ("f2", "late 2")]) == "f1"
    assert ts.release(tid, "a", turn) == "f1", "a second release adds nothing"
    assert [m.content for m in ts.history(tid)] == ["qa", "A"] and ts.stop_kind(tid, "a") is None
    assert [x.decode() for x in r.lrange(ts.keys.thread_queue(tid), 0, -1)] == ["f2", "c", "b", "c2", "d"]
    assert [e["run_id"] for e in ts.runs(tid)] == ["a", "b", "c", "c2", "d", "f1", "f2"]
    assert ts.release(tid, "d", []) == "f1", "a queued run that ended leaves the queue"
    for rid in ("f1", "f2", "c", "b"):
        ts.release(tid, rid, [])
    assert ts.release(tid, "c2", []) is None and ts.active(tid) is None
    assert 0 < r.ttl(ts.keys.thread(tid)) <= 600 and 0 < r.ttl(ts.keys.thread_history(tid)) <= 600




# ----------------------------------------------------------------------------- CLI


def test_cli_run_on_a_thread_then_show_it(redis_url, llm, workers):
    import json
    import subprocess
    import sys

    from tests.integration.conftest import ROOT, worker_env

    env = worker_env(redis_url, llm, COLUMNS="120")

    def reactq(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "dispatcher", *args], cwd=ROOT, env=env, text=True,
                              capture_output=True, stdin=subprocess.DEVNULL, timeout=60, check=False)

    tid = _tid()
    q1 = llm.script(llm.unique("cli thread: remember 42"), [reply_text("ok")], synthesis=reply_text("Remembered 42."))
    q2 = llm.script(llm.unique("cli thread: what did I ask you to remember?"), [reply_text("42")],
                    synthesis=reply_text("You asked me to remember 42."))
    assert reactq("run", q1, "--thread", tid, "--json", "--no-completion-check").returncode == 0
    second = reactq("run", q2, "--thread", tid, "--strategy", "reject", "--json")
    assert second.returncode == 0, second.stderr
    assert [m.get("content") for m in _first_turn(llm, q2)["messages"][1:]] == [q1, "Remembered 42.", q2]
    shown = reactq("thread", tid, "--json")
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert [r["query"] for r in view["runs"]] == [q1, q2] and view["active_run"] is None
    from reactq.dispatcher.cli import app
    from typer.testing import CliRunner

    def in_process(*args: str) -> Any:
        return CliRunner().invoke(app, list(args), env=env)

    pretty = in_process("thread", tid)
    assert pretty.exit_code == 0 and "Remembered 42." in pretty.output and "succeeded" in pretty.output
    assert in_process("thread", "no{such}").exit_code == 2
    assert in_process("thread", _tid()).exit_code == 1
    bad = in_process("run", "q", "--thread", "sp ace")
    assert bad.exit_code == 2 and "thread_id" in bad.output
    assert in_process("run", "q", "--thread", tid, "--local").exit_code == 2


def test_a_handed_on_run_whose_first_message_is_lost_is_sent_again(workers, dispatcher, llm, settings):
    """The release sent the next run's first step and the message died with a worker before
    the task started (parked in the broker's unacked set for an hour): a lease watchdog
    sends it again, so a thread is never blocked by a run that never starts."""
    from reactq.workers import threads as wthreads
    from reactq.workers.runtime import Runtime

    tid = _tid()
    ghost = _ended_but_not_released(dispatcher, tid, "ghost answer 3")
    q2 = llm.script(llm.unique("behind a lost message"), [reply_text("ok")], synthesis=reply_text("found"))
    from reactq.dispatcher.threads import thread_store

    # Enqueue behind the ghost without the gateway's repair (which would release it at once).
    rid = uuid.uuid4().hex
    assert thread_store(dispatcher).submit(tid, rid, "enqueue", q2).kind == "enqueued"
    dispatcher.store.create(rid, RunRequest(query=q2, thread_id=tid, completion_check=False).model_dump(mode="json"))
    lost: list[Any] = []
    rt = Runtime(settings)
    wthreads.ended(rt, dispatcher.store.load(ghost).state, lambda *a: lost.append(a))
    assert lost == [("reactq.iterate", [rid, 0], "reactq.runs")], "the first step was sent (and lost)"
    assert dispatcher.handle(rid).result(timeout=30)["answer"] == "found"


def test_a_run_decided_but_never_stored_is_skipped_once_old(r):
    """A submitter that died between the decision and storing the run must not block the
    thread: the hand-off skips such a run once its decision is older than ORPHAN_AFTER."""
    from reactq.shared.engine.state import RunState
    from reactq.shared.store import RunStore
    from reactq.shared.threads import ORPHAN_AFTER, ThreadStore, end_of_run

    ts, runs = ThreadStore(r), RunStore(r)
    tid = _tid()
    assert ts.submit(tid, "a1", "enqueue", "qa").kind == "start"
    ts.submit(tid, "lost-old", "enqueue", "q?", now=time.time() - ORPHAN_AFTER - 1)
    ts.submit(tid, "b1", "enqueue", "qb")
    runs.create("b1", {"query": "qb", "thread_id": tid})
    ts.submit(tid, "lost-new", "enqueue", "q?")
    done = RunState(run_id="a1", query="qa", model="m", mode="native", max_iterations=1, thread_id=tid,
                    phase="done", status="succeeded", final_answer="A")
    assert end_of_run(ts, runs, tid, done) == "b1", "the old orphan is skipped"
    done_b = done.model_copy(update={"run_id": "b1", "query": "qb"})
    assert end_of_run(ts, runs, tid, done_b) is None, "a young one is left to its live submitter"
    assert ts.active(tid) == "lost-new"
    r.delete(*ts.keys.thread_keys(tid), runs.keys.run("b1"))


def test_an_interrupt_during_the_llm_call_sends_none_of_its_tool_calls(workers, dispatcher, llm):
    """The LLM was thinking when the interrupt came; the calls its reply makes are answered
    as interrupted and never run (no duplicate side effects after the user changed course)."""
    tid = _tid()
    q1 = llm.script(llm.unique("think, then charge the card"), [
        reply_tool_calls([("p1", "charge_card", {"tag": f"never-{tid}", "seconds": 0.1})], delay=2.0),
        reply_text("charged")], synthesis=reply_text("never"))
    h1 = _submit(dispatcher, q1, tid)
    _wait(lambda: _loop_requests(llm, q1), what="the LLM call")
    q2 = llm.script(llm.unique("no, do not charge"), [reply_text("ok")], synthesis=reply_text("not charged"))
    h2 = _submit(dispatcher, q2, tid, "interrupt")
    assert h1.result(timeout=30)["status"] == "cancelled"
    assert h2.result(timeout=30)["answer"] == "not charged"
    s1 = dispatcher.store.load(h1.run_id).state
    assert [(m.tool_call_id, m.content) for m in s1.messages if m.role == "tool"] == [
        ("p1", P.INTERRUPTED_OBSERVATION)]
    time.sleep(1.0)
    assert _tool_end(dispatcher, f"never-{tid}") is None, "the tool never ran"
    assert "charge_card" in thread_view(dispatcher, tid)["messages"][1]["content"]
