"""Threads under crashes and half-done writes: kill -9 during an ``interrupt``, a worker that
died between a run's last commit and the thread's release, a lost first message, a run
decided but never stored; and the Lua decisions one by one on a real Redis.
"""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

import pytest

from reactq.dispatcher.client import Dispatcher
from reactq.dispatcher.threads import thread_view
from reactq.shared.engine import prompts as P
from reactq.shared.requests import RunRequest
from tests.integration.thread_kit import (
    ended_but_not_released,
    first_turn,
    mid_tool,
    new_tid,
    submit,
    wait,
)
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = pytest.mark.integration


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
    tid = new_tid()
    q1 = llm.script(llm.unique("slow work to be interrupted"), [
        reply_tool_calls([("k1", "slow", {"tag": f"kill-{tid}", "seconds": 2.0})]),
        reply_text("slow done")], synthesis=reply_text("never"))
    q2 = llm.script(llm.unique("new direction after the crash"), [reply_text("fine")],
                    synthesis=reply_text("after the crash"))
    h1 = submit(d, q1, tid)
    mid_tool(d, h1.run_id)
    if when == "before_the_stop":
        first.kill()
        h2 = submit(d, q2, tid, "interrupt")
    else:
        h2 = submit(d, q2, tid, "interrupt")
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
    first_of_2 = first_turn(llm, q2)
    assert [m["role"] for m in first_of_2["messages"][1:]] == ["user", "assistant", "user"]
    assert "interrupted" in first_of_2["messages"][2]["content"]
    view = thread_view(d, tid)
    assert view["active_run"] is None
    assert [(r["run_id"], r["status"]) for r in view["runs"]] == [(h1.run_id, "cancelled"),
                                                                  (h2.run_id, "succeeded")]
    assert len(view["messages"]) == 4, "each run's turns recorded once"


def test_a_redelivered_task_hands_on_a_thread_its_crashed_worker_did_not(workers, dispatcher, llm):
    tid = new_tid()
    from reactq.dispatcher.threads import thread_store

    ghost = ended_but_not_released(dispatcher, tid, "ghost answer")
    ts = thread_store(dispatcher)
    dispatcher.send("reactq.iterate", [ghost, None])  # what the lease watchdog resends
    wait(lambda: ts.active(tid) is None, what="the redelivered task to release the thread")
    assert [m.content for m in ts.history(tid)][1:] == ["ghost answer"]
    dispatcher.send("reactq.iterate", [ghost, None])
    time.sleep(0.5)
    assert len(ts.history(tid)) == 2, "a second redelivery adds nothing"


def test_the_next_submission_repairs_a_thread_left_active_by_an_ended_run(workers, dispatcher, llm):
    tid = new_tid()
    ended_but_not_released(dispatcher, tid, "ghost answer 2")
    q2 = llm.script(llm.unique("after the ghost"), [reply_text("ok")], synthesis=reply_text("b2"))
    h2 = submit(dispatcher, q2, tid, "reject")  # would be refused if the ended run still held the thread
    assert h2.created and h2.result(timeout=30)["status"] == "succeeded"
    assert [m.get("content") for m in first_turn(llm, q2)["messages"][1:]][1:] == ["ghost answer 2", q2]


def test_the_thread_scripts_decide_every_strategy(r):
    """The Lua decisions on a real Redis, one by one (no workers): queue order, stop marks,
    idempotent release, TTL only once idle."""
    from reactq.shared.models import ChatMessage
    from reactq.shared.stores.threads import Decision, ThreadStore

    ts = ThreadStore(r, ttl_seconds=600)
    tid = new_tid()
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


def test_a_handed_on_run_whose_first_message_is_lost_is_sent_again(workers, dispatcher, llm, settings):
    """The release sent the next run's first step and the message died with a worker before
    the task started (parked in the broker's unacked set for an hour): a lease watchdog
    sends it again, so a thread is never blocked by a run that never starts."""
    from reactq.workers.runs import threads as wthreads
    from reactq.workers.runtime import Runtime

    tid = new_tid()
    ghost = ended_but_not_released(dispatcher, tid, "ghost answer 3")
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
    from reactq.shared.stores.runs import RunStore
    from reactq.shared.stores.threads import ORPHAN_AFTER, ThreadStore
    from reactq.shared.service.threads import end_of_run

    ts, runs = ThreadStore(r), RunStore(r)
    tid = new_tid()
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
