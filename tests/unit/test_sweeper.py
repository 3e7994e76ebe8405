"""The stall sweeper picks exactly the unfinished, unchanged, unheld runs (fakeredis)."""

from __future__ import annotations

import fakeredis

from reactq.shared.keys import Keys
from reactq.shared.stores.runs import RunStore
from reactq.workers.recovery.sweeper import Sweeper, stalled


def _run(r, keys: Keys, run_id: str, status: str, updated: float) -> None:
    r.zadd(keys.runs, {run_id: updated})
    r.hset(keys.run(run_id), mapping={"status": status, "updated_at": updated})


def test_only_unfinished_unchanged_unheld_runs_are_stalled() -> None:
    r, keys = fakeredis.FakeRedis(), Keys()
    _run(r, keys, "old", "running", 100.0)
    _run(r, keys, "queued-old", "queued", 100.0)
    _run(r, keys, "fresh", "running", 195.0)
    _run(r, keys, "done", "succeeded", 100.0)
    _run(r, keys, "held", "running", 100.0)
    r.set(keys.lease("run:held"), "token")
    assert sorted(stalled(RunStore(r, keys=keys), stall=60, now=200.0)) == ["old", "queued-old"]


def test_a_stalled_run_is_resent_once_per_window_for_the_fleet() -> None:
    r, keys = fakeredis.FakeRedis(), Keys()
    _run(r, keys, "old", "running", 1.0)
    sent: list[tuple[str, list, str]] = []
    a = Sweeper(RunStore(r, keys=keys), lambda t, args, q: sent.append((t, args, q)), stall=60)
    b = Sweeper(RunStore(r, keys=keys), lambda t, args, q: sent.append((t, args, q)), stall=60)
    assert a.sweep() == ["old"] and b.sweep() == []
    assert sent == [("reactq.iterate", ["old", None], "reactq.runs")]
