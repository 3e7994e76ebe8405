"""Two real ``reactq scheduler`` processes, the active one killed with kill -9: the standby
takes over within seconds, and every tick has exactly one run (missed ticks fire on takeover
within the catch-up window, else they are skipped and counted), never two."""

from __future__ import annotations

import os
import signal
import time
import pytest

from reactq.shared.schedule.models import ScheduleRequest
from reactq.shared.schedule.times import iso, parse_instant
from tests.integration.schedule_kit import Scheduler, Site, site, wait_for

# Every case kills or freezes a scheduler and waits out its lock: the fault tier (make test-faults).
pytestmark = [pytest.mark.integration, pytest.mark.faults]
__all__ = ["site"]

#: The lock's TTL (3 s) plus one loop interval (1 s) is ≈ 4 s; the rest is slack for a
#: loaded machine (the standby's poll and this test's look at its log).
TAKEOVER_S = 6.0


def _active_and_standby(site: Site) -> tuple[Scheduler, Scheduler]:
    a, b = site.scheduler("a"), site.scheduler("b")
    first = wait_for(lambda: next((s for s in (a, b) if s.holds_lock()), None), 30, "a scheduler holding the lock")
    other = b if first is a else a
    time.sleep(1.5)
    assert not other.holds_lock(), "only one scheduler holds the lock"
    assert other.proc.poll() is None, f"the standby is waiting, not dead:\n{other.text()[-2000:]}"
    return first, other


def _fail_over(site: Site, schedule_id: str, runs_before: int) -> tuple[float, float]:
    """Kill the active scheduler once the schedule has ``runs_before`` runs; (kill, takeover) times."""
    active, standby = _active_and_standby(site)
    wait_for(lambda: len(site.run_ids(schedule_id)) >= runs_before, 30, f"{runs_before} runs")
    killed = time.time()
    active.kill()
    wait_for(standby.holds_lock, 15, "the standby to take the lock")
    took_over = time.time()
    assert took_over - killed < TAKEOVER_S, f"took {took_over - killed:.1f}s to take over"
    time.sleep(3)
    standby.stop()
    return killed, took_over


def test_an_interval_schedule_has_one_run_per_tick_through_a_kill_of_the_active_scheduler(site: Site):
    # Given an every-second schedule whose runs may overlap (no workers: runs stay queued),
    # and two schedulers, one active.
    view = site.schedules.create(ScheduleRequest.model_validate(
        {"schedule_id": "every-second", "interval_s": 1, "overlap": "allow", "run": {"query": "tick"}}))
    first = int(parse_instant(view["next_tick"]))
    # When the active one is killed mid-way,
    killed, took_over = _fail_over(site, "every-second", 4)
    # then every tick from the first to the last one handled has exactly one run,
    ticks = site.ticks("every-second")
    assert all(n == 1 for n in ticks.values()), f"a tick with two runs: {ticks}"
    rec = site.store.get("every-second")
    assert rec is not None and rec.next_tick is not None
    expected = {iso(t) for t in range(first, rec.next_tick)}
    assert set(ticks) == expected, f"missing: {sorted(expected - set(ticks))}"
    assert rec.fired == len(expected) and rec.skipped == 0
    # and the ticks of the outage fired late, once the standby took over (not lost).
    late = [t for t in ticks if killed + 1 < parse_instant(t) < took_over - 1]
    assert late, "the outage spanned ticks"
    for t in late:
        rid = next(r for r in site.run_ids("every-second")
                   if site.r.hget(site.keys.run(r), "scheduled_for") == t.encode())
        assert float(site.r.hget(site.keys.run(rid), "created_at") or 0) >= took_over - 1.5


def test_a_seconds_cron_skips_and_counts_ticks_older_than_the_catch_up_window(site: Site):
    # Given two schedulers with a catch-up window of 1 s, one active, and a 6-field cron
    # firing every second,
    a, b = site.scheduler("a", REACTQ_SCHEDULE_CATCHUP_S="1"), site.scheduler("b", REACTQ_SCHEDULE_CATCHUP_S="1")
    active = wait_for(lambda: next((s for s in (a, b) if s.holds_lock()), None), 30, "a scheduler holding the lock")
    standby = b if active is a else a
    view = site.schedules.create(ScheduleRequest.model_validate(
        {"schedule_id": "cron-seconds", "cron": "* * * * * *", "overlap": "allow", "run": {"query": "tick"}}))
    first = int(parse_instant(view["next_tick"]))
    wait_for(lambda: len(site.run_ids("cron-seconds")) >= 3, 30, "3 runs")
    # When the active one is killed (the standby needs ≈ 3-4 s, longer than the window),
    killed = time.time()
    active.kill()
    wait_for(standby.holds_lock, 15, "the standby to take the lock")
    assert time.time() - killed < TAKEOVER_S
    time.sleep(3)
    standby.stop()
    # then each tick either has one run or was counted as skipped, never both, never twice.
    ticks = site.ticks("cron-seconds")
    assert all(n == 1 for n in ticks.values()), f"a tick with two runs: {ticks}"
    rec = site.store.get("cron-seconds")
    assert rec is not None and rec.next_tick is not None
    total = rec.next_tick - first
    assert rec.fired == len(ticks) and rec.fired + rec.skipped == total
    assert rec.skipped >= 1, "ticks older than the window were skipped"
    missing = [t for t in range(first, rec.next_tick)
               if iso(t) not in ticks]
    # Exactly the ticks of the outage that were more than 1 s old on takeover are missing.
    assert len(missing) == rec.skipped
    # (The active one may have been a tick or two behind when it was killed, on a busy machine.)
    assert all(killed - 3 <= t <= killed + TAKEOVER_S for t in missing), (killed, missing)


def test_a_frozen_scheduler_that_lost_its_lock_stands_by_and_fires_nothing_twice(site: Site):
    # Given two schedulers and an every-second schedule,
    active, standby = _active_and_standby(site)
    view = site.schedules.create(ScheduleRequest.model_validate(
        {"schedule_id": "frozen", "interval_s": 1, "overlap": "allow", "run": {"query": "tick"}}))
    first = int(parse_instant(view["next_tick"]))
    wait_for(lambda: len(site.run_ids("frozen")) >= 2, 20, "two runs")
    # when the active one is frozen past its lock's TTL (the standby takes over) and thawed,
    os.killpg(active.proc.pid, signal.SIGSTOP)
    wait_for(standby.holds_lock, 15, "the standby to take the lock")
    os.killpg(active.proc.pid, signal.SIGCONT)
    wait_for(lambda: "lost the lock" in active.text(), 10, "the thawed scheduler to notice")
    time.sleep(2)
    # then it stands by (alive, not firing), and every tick still has exactly one run.
    assert active.proc.poll() is None, active.text()[-2000:]
    standby.stop()  # releases the lock: the thawed one takes over again
    wait_for(lambda: active.text().count("beat: Acquired lock") >= 2, 10, "the thawed one to take over")
    time.sleep(2)
    active.stop()
    ticks = site.ticks("frozen")
    assert all(n == 1 for n in ticks.values()), f"a tick with two runs: {ticks}"
    rec = site.store.get("frozen")
    assert rec is not None and rec.next_tick is not None
    assert set(ticks) == {iso(t) for t in range(first, rec.next_tick)}
    assert rec.fired == len(ticks) and rec.skipped == 0
