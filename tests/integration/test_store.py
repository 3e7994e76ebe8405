"""The run store and leases against a real Redis-compatible server (no workers)."""

from __future__ import annotations

import time
import uuid

import pytest
import redis

from reactq.shared.engine import ending, loop
from reactq.shared.engine.state import RunState
from reactq.shared.keys import Keys
from reactq.shared.stores.runs import RunStore
from reactq.workers.recovery.lease import Leases

pytestmark = pytest.mark.integration


def _state(run_id: str) -> RunState:
    return loop.new_run(run_id=run_id, query="q", model="m", native=True, available_tools=[],
                        max_iterations=5, now=time.time())


@pytest.fixture
def store(r: redis.Redis) -> RunStore:
    return RunStore(r, keys=Keys(f"t{uuid.uuid4().hex[:6]}:"), ttl_seconds=60, maxlen=100)


def test_commit_is_compare_and_set_on_the_step_number(store):
    """Invariant 3: a redelivered step that already committed is refused."""
    rid, _ = store.create("r1", {"query": "q"})
    st = _state(rid)
    ev = loop.begin_turn(st)
    assert store.commit(rid, st, 0, ev)
    again = _state(rid)
    assert not store.commit(rid, again, 0, loop.begin_turn(again))
    assert store.load(rid).step_no == 1


def test_events_are_published_once_per_seq_even_when_a_step_is_redone(store):
    """Invariant 3: consumers see each seq once, in order."""
    rid, _ = store.create("r2", {"query": "q"})
    st = _state(rid)
    first = loop.begin_turn(st)
    store.publish(rid, first)
    store.publish(rid, first)  # a redelivered step re-creates the same seq
    st2 = _state(rid)
    redo = loop.begin_turn(st2) + [loop.emit(st2, "phase", phase="x")]
    assert store.commit(rid, st2, 0, redo)
    seqs = [e.seq for _, e in store.read_events(rid)]
    assert seqs == [1, 2]


def test_a_finished_run_expires_and_its_stream_is_capped(store, r):
    """Invariant 7: TTL after the end; MAXLEN ~ on the stream."""
    rid, _ = store.create("r3", {"query": "q"})
    st = _state(rid)
    events = [loop.emit(st, "answer", status="delta", content=str(i)) for i in range(500)]
    events += ending.fail(st, "boom", now=time.time())
    assert store.commit(rid, st, 0, events)
    assert 0 < r.ttl(store.keys.run(rid)) <= 60
    assert 0 < r.ttl(store.keys.run_events(rid)) <= 60
    assert r.xlen(store.keys.run_events(rid)) < 400
    assert store.status(rid)["status"] == "failed"


def test_an_idempotency_key_returns_the_first_run(store):
    a, created_a = store.create("a", {"query": "q"}, idempotency_key="k")
    b, created_b = store.create("b", {"query": "q"}, idempotency_key="k")
    assert (a, created_a, b, created_b) == ("a", True, "a", False)


def test_a_lease_backs_off_while_held_and_a_takeover_from_a_dead_holder_is_seen(r):
    """A second delivery of a live step backs off; taking over a dead holder's lease says so
    (that is how a crash is counted, workers/recovery/watchdog.py)."""
    keys = Keys(f"t{uuid.uuid4().hex[:6]}:")
    leases = Leases(r, keys, ttl_seconds=0.3, holder="me")
    with leases.hold("run:x", "reactq.iterate", ["x", None], "reactq.runs") as held:
        assert held and not leases.took_over()
        with leases.hold("run:x", "reactq.iterate", ["x", None], "reactq.runs", wait=0.05) as other:
            assert not other
        time.sleep(0.5)  # the heartbeat keeps it alive past its TTL
        assert leases.alive("run:x")
    assert not r.hexists(keys.lease_tasks_for("run:x"), "run:x")  # a normal release leaves no record
    # A holder that dies leaves its record behind and its key to expire.
    r.set(keys.lease("run:y"), "dead", px=100)
    r.hset(keys.lease_tasks_for("run:y"), "run:y", '{"task": "reactq.iterate", "args": ["y", null], "queue": "reactq.runs"}')
    with leases.hold("run:y", "reactq.iterate", ["y", None], "reactq.runs") as held:
        assert held and leases.took_over()


def test_a_late_ledger_write_for_a_call_already_done_is_refused(store):
    """A worker cut off by a partition finishes a call another worker already finished: the
    first result stands (failed before: ledger_done overwrote it)."""
    from reactq.shared.engine.state import ToolOutcome

    rid, _ = store.create("r9", {"query": "q"})
    assert store.ledger_claim(rid, "c1", "tok-a", 1)
    first = ToolOutcome(tool_call_id="c1", tool_name="slow", observation="from b", worker="b")
    late = ToolOutcome(tool_call_id="c1", tool_name="slow", observation="from a", worker="a")
    assert store.ledger_done(rid, "c1", first, 1) is True
    assert store.ledger_done(rid, "c1", late, 1) is False
    assert store.ledger_outcomes(rid, ["c1"])["c1"].worker == "b"


def test_the_stored_result_is_the_done_events_result(store):
    """S78/S80: ``done.iterations = result.iterations`` (0 after a failure) and one rounding
    of ``elapsed``, in the stored result as in the event (they disagreed before)."""
    rid, _ = store.create("r4", {"query": "q"})
    st = _state(rid)
    st.started_at = 100.0
    st.iteration = 2
    events = ending.fail(st, "boom", now=101.23456)
    assert store.commit(rid, st, 0, events)
    result = store.status(rid)["result"]
    done = events[-1].data
    assert {k: result[k] for k in ("answer", "iterations", "usage", "elapsed", "status")} == {
        k: done[k] for k in ("answer", "iterations", "usage", "elapsed", "status")}
    assert (result["iterations"], result["elapsed"], result["error"]) == (0, 1.23, "boom")
