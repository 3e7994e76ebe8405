"""The firing logic in-process against real Redis (no scheduler process): racing firers,
a firer that died between creating a tick's run and handing the tick on, the catch-up
window, and the compare-and-set that hands a tick on once."""

from __future__ import annotations

import threading

import pytest

from reactq.shared.schedule.models import ScheduleRequest
from reactq.shared.schedule.policy import tick_key
from reactq.shared.schedule.times import iso
from reactq.shared.stores.idempotency import idempotent_id
from reactq.workers.scheduler.fire import Firer
from tests.integration.schedule_kit import Site, site

pytestmark = pytest.mark.integration
__all__ = ["site"]


def _schedule(site: Site, sid: str, first: int, **extra: object) -> None:
    """A schedule whose next tick is ``first`` (as if no scheduler had run since)."""
    req = ScheduleRequest.model_validate({"schedule_id": sid, "interval_s": 1, "overlap": "allow",
                                          "run": {"query": "tick"}, **extra})
    assert site.store.create(req, first)


def test_racing_firers_make_one_run_per_tick(site: Site):
    now = 1_900_000_000
    _schedule(site, "race", now - 20)
    firers = [Firer(site.settings) for _ in range(4)]
    threads = [threading.Thread(target=f.fire_due, args=(now,)) for f in firers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ticks = site.ticks("race")
    assert set(ticks) == {iso(t) for t in range(now - 20, now + 1)} and set(ticks.values()) == {1}
    rec = site.store.get("race")
    assert rec is not None and rec.fired == 21 and rec.next_tick == now + 1 and rec.skipped == 0


def test_a_run_made_before_a_crash_is_the_ticks_run(site: Site):
    now = 1_900_000_000
    _schedule(site, "crashy", now, overlap="skip")
    firer = Firer(site.settings)
    rec = site.store.get("crashy")
    assert rec is not None
    # A firer created the tick's run, then died before handing the tick on.
    run_id, _ = firer._fire_tick(rec, now)
    assert run_id == idempotent_id(tick_key("crashy", iso(now)))
    # Its successor finds that run (still queued: overlap=skip would otherwise skip the tick).
    Firer(site.settings).fire_due(now)
    assert site.ticks("crashy") == {iso(now): 1}
    rec = site.store.get("crashy")
    assert rec is not None and rec.last_run_id == run_id and rec.fired == 1 and rec.skipped == 0


def test_a_run_made_before_a_crash_counts_as_fired_even_past_the_catch_up_window(site: Site):
    now = 1_900_000_000
    _schedule(site, "crashy-late", now - 30)
    rec = site.store.get("crashy-late")
    assert rec is not None
    # A firer created the tick's run and died; its successor takes over 30 s later.
    run_id, _ = Firer(site.settings)._fire_tick(rec, now - 30)
    Firer(site.settings.model_copy(update={"schedule_catchup_s": 10.0})).fire_due(now)
    ticks = site.ticks("crashy-late")
    assert ticks[iso(now - 30)] == 1 and set(ticks.values()) == {1}
    assert set(ticks) == {iso(now - 30)} | {iso(t) for t in range(now - 10, now + 1)}
    rec = site.store.get("crashy-late")
    # A tick has a run or is counted skipped, never both.
    assert rec is not None and rec.fired == len(ticks) and rec.skipped == 30 - 10 - 1


def test_ticks_older_than_the_catch_up_window_are_counted_not_fired(site: Site):
    now = 1_900_000_000
    _schedule(site, "late", now - 1000)
    Firer(site.settings.model_copy(update={"schedule_catchup_s": 10.0})).fire_due(now)
    ticks = site.ticks("late")
    assert set(ticks) == {iso(t) for t in range(now - 10, now + 1)}
    rec = site.store.get("late")
    assert rec is not None and rec.skipped == 990 and rec.fired == 11


def test_a_tick_is_handed_on_once(site: Site):
    _schedule(site, "cas", 100)
    assert site.store.advance("cas", 100, 101, skipped=1)
    assert not site.store.advance("cas", 100, 101, skipped=1), "the second hand-on of one tick"
    rec = site.store.get("cas")
    assert rec is not None and rec.next_tick == 101 and rec.skipped == 1
    site.schedules.set_paused("cas", True)
    assert not site.store.advance("cas", 101, 102), "a paused schedule hands nothing on"
    site.schedules.delete("cas")
    assert not site.store.advance("cas", 101, 102)
    Firer(site.settings).fire_due(1_900_000_000)
    assert site.r.zcard(site.keys.schedules_due) == 0, "the deleted schedule left the due set"


def test_two_tenants_schedules_of_one_id_fire_apart(site: Site):
    """A schedule id is its tenant's: two tenants' ``nightly`` are two schedules, each firing
    its own runs (its tenant's, under its own tick keys), listed and deleted on its own."""
    now = 1_900_000_000
    for tenant in ("acme", "beta"):
        req = ScheduleRequest.model_validate({"schedule_id": "nightly", "interval_s": 1, "overlap": "allow",
                                              "run": {"query": f"{tenant}'s tick"}})
        assert site.store.create(req, now, tenant)
    _schedule(site, "nightly", now)  # and the default tenant's, under the name it always had
    assert site.r.exists(site.keys.schedule("nightly"))
    Firer(site.settings).fire_due(now)
    runs = {}
    for tenant in ("acme", "beta", "default"):
        rec = site.store.get("nightly", tenant)
        assert rec is not None and rec.tenant == tenant and rec.fired == 1 and rec.last_run_id
        fields = site.r.hgetall(site.keys.run(rec.last_run_id))
        assert fields[b"tenant"].decode() == tenant and fields[b"schedule_id"] == b"nightly"
        runs[tenant] = rec.last_run_id
    assert len(set(runs.values())) == 3
    assert runs["default"] == idempotent_id(tick_key("nightly", iso(now)))
    assert site.run_ids("nightly") == [runs["default"]]
    assert site.schedules.delete("nightly", "beta") is None
    assert site.store.get("nightly", "beta") is None
    assert site.store.get("nightly", "acme") is not None and site.store.get("nightly") is not None
    assert sorted((r.tenant, r.schedule_id) for r in site.store.all()) == [("acme", "nightly"), ("default", "nightly")]


def test_a_schedule_stored_under_its_bare_id_keeps_firing_for_its_tenant(site: Site):
    """Another tenant's schedule whose hash is at its bare id is fired and handed on under
    that name, and its tenant reads, changes and deletes it."""
    now = 1_900_000_000
    _schedule(site, "old", now)
    site.r.hset(site.keys.schedule("old"), "tenant", "acme")
    Firer(site.settings).fire_due(now)
    rec = site.store.get("old", "acme")
    assert rec is not None and rec.fired == 1 and rec.next_tick == now + 1 and rec.name == "old"
    assert site.r.zscore(site.keys.schedules_due, "old") == now + 1
    assert site.r.hget(site.keys.run(rec.last_run_id or ""), "tenant") == b"acme"
    assert site.store.get("old", "beta") is None and site.store.get("old") is None
    assert site.schedules.set_paused("old", True, "acme")["paused"] is True
    site.schedules.delete("old", "acme")
    assert not site.r.exists(site.keys.schedule("old")) and site.r.zcard(site.keys.schedules) == 0
