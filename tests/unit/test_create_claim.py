"""A create with an idempotency key and a creator killed half-way (fakeredis: pure ordering).

Found by the batch resume test: a batch driver SIGKILLed between writing a run and claiming
its line's key left a run that the due watchdog started, while the resumed batch made the
run the key names: one question paid twice. A run (or DAG) is due only once its key is ours.
"""

from __future__ import annotations

import fakeredis
import pytest

from reactq.shared.stores import idempotency
from reactq.shared.stores.dags import DagStore
from reactq.shared.stores.due import dag_member, run_member
from reactq.shared.keys import Keys
from reactq.shared.stores.idempotency import idempotent_id
from reactq.shared.stores.runs import RunStore


class Killed(BaseException):
    """The creator's process dies here."""


def _die(*_a: object, **_k: object) -> None:
    raise Killed


@pytest.fixture
def r() -> fakeredis.FakeRedis:
    return fakeredis.FakeRedis()


def test_a_run_creator_killed_before_its_claim_leaves_nothing_due(r, monkeypatch) -> None:
    runs = RunStore(r)
    monkeypatch.setattr(idempotency, "claim", _die)
    with pytest.raises(Killed):
        runs.create("orphan", {"query": "q"}, idempotency_key="line-1")
    assert r.zscore(Keys().due, run_member("orphan")) is None
    monkeypatch.undo()
    assert runs.create("winner", {"query": "q"}, idempotency_key="line-1") == ("winner", True)
    assert r.zscore(Keys().due, run_member("winner")) is not None


def test_a_queued_winner_that_lost_its_due_entry_is_armed_by_the_next_creator(r) -> None:
    runs = RunStore(r)
    runs.create("winner", {"query": "q"}, idempotency_key="k")
    r.zrem(Keys().due, run_member("winner"))  # killed between its claim and its due entry
    assert runs.create("again", {"query": "q"}, idempotency_key="k") == ("winner", False)
    assert r.zscore(Keys().due, run_member("winner")) is not None
    assert r.zscore(Keys().due, run_member("again")) is None and not r.exists(Keys().run("again"))
    for rows in (Keys().runs, Keys().runs_status("queued"), Keys().runs_tenant("default")):
        assert r.zscore(rows, "again") is None and r.zscore(rows, "winner") is not None


def test_runs_without_a_key_are_due_at_once(r) -> None:
    RunStore(r).create("plain", {"query": "q"})
    assert r.zscore(Keys().due, run_member("plain")) is not None


def test_a_dag_creator_killed_before_its_claim_leaves_nothing_due(r, monkeypatch) -> None:
    dags = DagStore(r)
    monkeypatch.setattr(idempotency, "claim", _die)
    with pytest.raises(Killed):
        dags.create("orphan", {"goal": "g"}, idempotency_key="k")
    assert r.zscore(Keys().due, dag_member("orphan")) is None
    monkeypatch.undo()
    assert dags.create("winner", {"goal": "g"}, idempotency_key="k") == ("winner", True)
    assert r.zscore(Keys().due, dag_member("winner")) is not None


def test_a_retried_create_reuses_the_run_a_killed_creator_wrote(r, monkeypatch) -> None:
    """The id a key names is derived from the key: a retry after a kill between write and
    claim finds the same record instead of leaving an orphan beside a second run."""
    runs = RunStore(r)
    rid = idempotent_id("line-1")
    monkeypatch.setattr(idempotency, "claim", _die)
    with pytest.raises(Killed):
        runs.create(rid, {"query": "q"}, idempotency_key="line-1")
    monkeypatch.undo()
    assert runs.create(idempotent_id("line-1"), {"query": "q"}, idempotency_key="line-1") == (rid, True)
    assert r.zcard(Keys().runs) == 1 and r.zscore(Keys().due, run_member(rid)) is not None


def test_a_create_never_rewrites_a_run_that_has_started(r) -> None:
    runs = RunStore(r)
    rid = idempotent_id("k")
    assert runs.create(rid, {"query": "q"}, idempotency_key="k") == (rid, True)
    r.hset(Keys().run(rid), mapping={"status": "running", "step_no": 3})
    assert runs.create(rid, {"query": "q"}, idempotency_key="k") == (rid, False)
    assert r.hget(Keys().run(rid), "status") == b"running" and r.hget(Keys().run(rid), "step_no") == b"3"


def test_a_retried_dag_create_reuses_the_dag_a_killed_creator_wrote(r, monkeypatch) -> None:
    dags = DagStore(r)
    did = idempotent_id("k", kind="dag")
    assert did != idempotent_id("k")  # a run and a DAG with one key are different things
    monkeypatch.setattr(idempotency, "claim", _die)
    with pytest.raises(Killed):
        dags.create(did, {"goal": "g"}, idempotency_key="k")
    monkeypatch.undo()
    assert dags.create(did, {"goal": "g"}, idempotency_key="k") == (did, True)
    assert r.zscore(Keys().due, dag_member(did)) is not None
