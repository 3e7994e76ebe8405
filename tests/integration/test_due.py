"""The durable due records and the watchdog's claim against a real Redis-compatible server
(no workers): what each commit makes due, and what a watchdog resends (issue 18)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from reactq.shared.engine import ending, loop
from reactq.shared.engine.state import RunState
from reactq.shared.models import ToolCallRequest
from reactq.shared.settings import Settings
from reactq.workers.recovery.backlog import Backlog
from reactq.workers.recovery.watchdog import DueWatchdog
from reactq.workers.runs.tasks import recoverers
from reactq.workers.runtime import Runtime

pytestmark = pytest.mark.integration


def _state(run_id: str) -> RunState:
    return loop.new_run(run_id=run_id, query="q", model="m", native=True, available_tools=[],
                        max_iterations=5, now=time.time())


class _Sent(list[tuple[str, list[Any], str]]):
    def __call__(self, task: str, args: list[Any], queue: str) -> None:
        self.append((task, args, queue))


@pytest.fixture
def rt(redis_url: str) -> Runtime:
    return Runtime(Settings(redis_url=redis_url, key_prefix=f"t{uuid.uuid4().hex[:6]}:",
                            lease_seconds=0.3, due_grace_seconds=0.2, max_task_crashes=2))


def _due(rt: Runtime) -> dict[str, float]:
    return {k.decode(): v for k, v in rt.redis.zrange(rt.keys.due, 0, -1, withscores=True)}


def test_every_commit_says_what_is_due_until_the_run_ends(rt: Runtime) -> None:
    store = rt.store
    rid, _ = store.create("d1", {"query": "q"})
    assert set(_due(rt)) == {"run:d1"}, "due from the moment the run exists"
    st = _state(rid)
    assert store.commit(rid, st, 0, loop.begin_turn(st))
    before = time.time() * 1000
    st.phase = "tools"
    st.pending_calls = [ToolCallRequest(id="c1", name="echo", arguments={}),
                        ToolCallRequest(id="c2", name="echo", arguments={})]
    assert store.commit(rid, st, 1, [])
    due = _due(rt)
    assert set(due) == {"run:d1", "tool:d1:c1", "tool:d1:c2"}
    assert due["run:d1"] > before + 3600_000, "the run waits for its tools, not the clock"
    assert due["tool:d1:c1"] <= before + 1000
    assert store.fanin(rid, 2, "c1", 2) == 1
    assert set(_due(rt)) == {"run:d1", "tool:d1:c2"}
    assert store.fanin(rid, 2, "c2", 2) == 2
    due = _due(rt)
    assert set(due) == {"run:d1"} and due["run:d1"] <= time.time() * 1000 + 1000
    st.phase, st.pending_calls = "llm", []
    assert store.commit(rid, st, 2, ending.fail(st, "boom", now=time.time()))
    assert _due(rt) == {}, "a terminal commit leaves nothing due"


def test_a_given_up_call_counted_in_while_another_waits_for_a_person_leaves_the_run_waiting(
        rt: Runtime) -> None:
    """The give-up path's fan-in holds the turn like a tool's close does: the set is kept
    (a person may answer days later) and the run is ``waiting`` once nothing else is out."""
    store = rt.store
    rid, _ = store.create("d3", {"query": "q"})
    st = _state(rid)
    assert store.commit(rid, st, 0, loop.begin_turn(st))
    st.phase = "tools"
    st.pending_calls = [ToolCallRequest(id="c1", name="echo", arguments={}),
                        ToolCallRequest(id="c2", name="echo", arguments={})]
    assert store.commit(rid, st, 1, [])
    rt.redis.hset(rt.keys.run(rid), mapping={"status": "running", "waiting": 1})  # c2 awaits approval
    assert store.fanin(rid, 2, "c1", 2) == 1
    assert rt.redis.ttl(rt.keys.run_fanin(rid, 2)) == -1, "kept while a person decides"
    assert store.fields_of([rid], "status") == [["waiting"]]
    assert rid.encode() in rt.redis.zrange(rt.keys.runs_status("waiting"), 0, -1)


def test_the_watchdog_resends_what_nobody_took_up_once_per_bound(rt: Runtime) -> None:
    sent = _Sent()
    dog = DueWatchdog(rt, sent, recoverers())
    rid, _ = rt.store.create("d2", {"query": "q"})
    assert dog.tick() == 0, "not due yet"
    time.sleep(0.6)
    assert dog.tick() == 1
    assert sent == [("reactq.iterate", ["d2", 0], "reactq.runs")]
    assert dog.tick() == 0, "claimed: one resend per bound, by one watchdog"
    # A step in progress holds its lease: looked at again later, never resent meanwhile.
    with rt.leases.hold("run:d2", "reactq.iterate", ["d2", None], "reactq.runs"):
        time.sleep(0.8)
        assert dog.tick() == 0 and len(sent) == 1


def test_a_step_whose_holder_died_too_often_ends_the_run(rt: Runtime) -> None:
    """Issue 10 item 2: the crash limit (2 here) ends the run failed with done."""
    sent = _Sent()
    dog = DueWatchdog(rt, sent, recoverers())
    rid, _ = rt.store.create("d3", {"query": "q"})
    st = _state(rid)
    assert rt.store.commit(rid, st, 0, loop.begin_turn(st))
    # The step that keeps crashing published live events past the saved state first.
    live = st.model_copy(deep=True)
    rt.store.publish(rid, [loop.emit(live, "step", type="thinking", status="start", iteration=1),
                           loop.emit(live, "phase", phase="x")])
    for _ in range(2):
        # A holder took the lease and died: its record stays, its key expires.
        rt.redis.hset(rt.keys.lease_tasks_for("run:d3"), "run:d3", '{"task": "reactq.iterate"}')
        time.sleep(0.6)
        assert dog.tick() == 1
    assert [t for t, _, _ in sent] == ["reactq.iterate"], "sent again once, then not"
    rec = rt.store.load(rid)
    assert rec.status == "failed"
    events = [e for _, e in rt.store.read_events(rid)]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.channel for e in events][-2:] == ["error", "done"]
    assert events[-2].data["kind"] == "task_crashed"
    assert _due(rt) == {}


def test_a_dag_is_due_from_its_creation(rt: Runtime) -> None:
    """A DAG's first driving message (``reactq.dag.start``) is covered like a run's."""
    from reactq.shared.stores.dags import DagStore

    dags = DagStore(rt.redis, keys=rt.keys, due_seconds=rt.settings.due_seconds)
    dags.create("g1", {"goal": "g"})
    due = _due(rt)
    assert set(due) == {"dag:g1"} and due["dag:g1"] <= (time.time() + 1) * 1000


class _Queues:
    """A broker's ready-message counts, set by the test."""

    def __init__(self) -> None:
        self.waiting: dict[str, int] = {}

    def __call__(self, queue: str) -> int:
        return self.waiting.get(queue, 0)


def test_work_waiting_behind_a_backlog_is_deferred_not_resent(rt: Runtime) -> None:
    """Thousands of runs submitted at once all wait longer than the bound in the queue:
    resending them only queued duplicates (bench P3@5000: 11.8 tasks a run instead of 6)."""
    queues = _Queues()
    sent = _Sent()
    dog = DueWatchdog(rt, sent, recoverers(), backlog=Backlog(queues))
    queues.waiting["reactq.runs"] = 500
    rt.store.create("d4", {"query": "q"})
    time.sleep(0.6)
    assert dog.tick() == 1 and sent == [], "claimed, but its message is still in the queue"
    time.sleep(0.6)
    assert dog.tick() == 1 and sent == [], "deferred again while the backlog lasts"
    queues.waiting["reactq.runs"] = 0  # drained: a message still missing was lost
    time.sleep(0.6)
    assert dog.tick() == 1
    assert sent == [("reactq.iterate", ["d4", 0], "reactq.runs")]


def test_a_dead_holder_is_resent_whatever_the_queue_holds(rt: Runtime) -> None:
    queues = _Queues()
    queues.waiting["reactq.runs"] = 500
    sent = _Sent()
    dog = DueWatchdog(rt, sent, recoverers(), backlog=Backlog(queues))
    rt.store.create("d5", {"query": "q"})
    # A holder took the lease and died: its record stays, its key expires.
    rt.redis.hset(rt.keys.lease_tasks_for("run:d5"), "run:d5", '{"task": "reactq.iterate"}')
    time.sleep(0.6)
    assert dog.tick() == 1
    assert sent == [("reactq.iterate", ["d5", 0], "reactq.runs")]


def test_a_broker_that_cannot_count_changes_nothing() -> None:
    def broken(queue: str) -> int:
        raise ConnectionError("broker away")

    backlog = Backlog(broken, clock=lambda: 100.0)
    backlog.poll(["reactq.runs"])
    assert backlog.clear_since("reactq.runs", 99.0), "unknown counts as clear: resend as before"
    assert not Backlog(lambda q: 3).clear_since("reactq.runs", 0.0)
