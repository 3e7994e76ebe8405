"""Fire times of schedules (pure): cron by wall clock in an IANA zone across 2027's DST
transitions in Europe/Berlin and America/New_York, seconds crons, intervals, validation."""

from __future__ import annotations

from datetime import date, datetime
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError

from reactq.shared.schedule.models import ScheduleRequest, SchedulePatch, merged
from reactq.shared.schedule.policy import overlap_action, tick_key, too_late
from reactq.shared.schedule.times import (
    Cadence,
    check_cron,
    check_zone,
    count_until,
    fire_times,
    iso,
    next_after,
    parse_instant,
)

BERLIN, NEW_YORK = "Europe/Berlin", "America/New_York"


def times(cron: str, zone: str, after: str, count: int) -> list[str]:
    return [iso(t) for t in fire_times(Cadence(cron=cron, timezone=zone), parse_instant(after), count)]


def test_a_time_skipped_by_spring_forward_fires_once_at_the_first_instant_after_the_gap():
    # Berlin 2027-03-28: 02:00 CET jumps to 03:00 CEST (01:00 UTC); 02:30 does not exist.
    assert times("30 2 * * *", BERLIN, "2027-03-27T00:00:00Z", 3) == [
        "2027-03-27T01:30:00Z", "2027-03-28T01:00:00Z", "2027-03-29T00:30:00Z"]
    # New York 2027-03-14: 02:00 EST jumps to 03:00 EDT (07:00 UTC).
    assert times("30 2 * * *", NEW_YORK, "2027-03-13T00:00:00Z", 3) == [
        "2027-03-13T07:30:00Z", "2027-03-14T07:00:00Z", "2027-03-15T06:30:00Z"]


def test_several_times_inside_one_gap_collapse_into_one_fire():
    assert times("*/15 2 * * *", BERLIN, "2027-03-27T23:00:00Z", 3) == [
        "2027-03-28T01:00:00Z", "2027-03-29T00:00:00Z", "2027-03-29T00:15:00Z"]


def test_a_time_repeated_by_fall_back_fires_once_at_its_first_occurrence():
    # Berlin 2027-10-31: 03:00 CEST goes back to 02:00 CET; 02:30 happens at 00:30 and 01:30 UTC.
    assert times("30 2 * * *", BERLIN, "2027-10-30T00:00:00Z", 3) == [
        "2027-10-30T00:30:00Z", "2027-10-31T00:30:00Z", "2027-11-01T01:30:00Z"]
    # New York 2027-11-07: 01:30 happens at 05:30 (EDT) and 06:30 UTC (EST).
    assert times("30 1 * * *", NEW_YORK, "2027-11-06T00:00:00Z", 3) == [
        "2027-11-06T05:30:00Z", "2027-11-07T05:30:00Z", "2027-11-08T06:30:00Z"]


def test_a_preview_from_inside_the_repeated_hour_never_goes_back():
    # 01:45 UTC on 2027-10-31 is 02:45 CET, the second pass through 02:xx in Berlin.
    assert times("*/30 * * * *", BERLIN, "2027-10-31T01:45:00Z", 2) == [
        "2027-10-31T02:00:00Z", "2027-10-31T02:30:00Z"]


@pytest.mark.parametrize("zone", [BERLIN, NEW_YORK])
@pytest.mark.parametrize("cron", ["30 2 * * *", "30 1 * * *", "0 3 * * *"])
def test_a_daily_cron_fires_exactly_once_on_every_day_of_2027(zone: str, cron: str):
    ticks = fire_times(Cadence(cron=cron, timezone=zone), parse_instant("2026-12-31T12:00:00Z"), 365)
    days = [datetime.fromtimestamp(t, ZoneInfo(zone)).date() for t in ticks]
    assert days == [date.fromordinal(date(2027, 1, 1).toordinal() + i) for i in range(365)]
    assert ticks == sorted(set(ticks))


@pytest.mark.parametrize("zone", [BERLIN, NEW_YORK])
def test_an_hourly_cron_fires_each_wall_clock_hour_of_2027_once(zone: str):
    tz = ZoneInfo(zone)
    start, end = datetime(2027, 1, 1, tzinfo=tz).timestamp(), datetime(2028, 1, 1, tzinfo=tz).timestamp()
    ticks = fire_times(Cadence(cron="0 * * * *", timezone=zone), start - 1, 8760)
    assert ticks == sorted(set(ticks))
    # 8,760 wall-clock hours: the skipped 02:00 fires at the gap's end, the instant 03:00
    # also names (one fire for both), and the repeated 02:00 fires once.
    assert sum(1 for t in ticks if t < end) == 8759
    assert ticks[-1] < end + 3600


def test_six_fields_put_seconds_first():
    assert times("*/20 * * * * *", "UTC", "2027-01-01T00:00:00Z", 3) == [
        "2027-01-01T00:00:20Z", "2027-01-01T00:00:40Z", "2027-01-01T00:01:00Z"]


def test_intervals_tick_at_multiples_of_the_interval_since_the_epoch():
    c = Cadence(interval_s=7)
    assert fire_times(c, 100.5, 3) == [105, 112, 119]
    assert next_after(c, 105) == 112
    assert count_until(c, 105, 120) == (3, 126)


def test_counting_missed_cron_ticks():
    assert count_until(Cadence(cron="*/2 * * * * *"), 100, 111) == (6, 112)
    assert count_until(Cadence(cron="*/2 * * * * *"), 100, 100) == (0, 100)


@pytest.mark.parametrize("bad", ["* * *", "61 * * * *", "0 0 30 2 *", "H * * * *", "@daily", "* * * * * * *"])
def test_bad_cron_expressions_are_refused(bad: str):
    with pytest.raises(ValueError):
        check_cron(bad)


def test_zones_are_iana_names():
    assert check_zone("Europe/Berlin") == "Europe/Berlin"
    for bad in ("Mars/Olympus", "../etc/passwd", ""):
        with pytest.raises(ValueError):
            check_zone(bad)


def _errors(body: dict) -> list[tuple[tuple, str]]:
    with pytest.raises(ValidationError) as info:
        ScheduleRequest.model_validate(body)
    return [(e["loc"], e["msg"]) for e in info.value.errors()]


def test_the_request_names_the_bad_field():
    run = {"query": "q"}
    assert _errors({"run": run})[0][0] == ("interval_s",)
    assert "not both" in _errors({"cron": "* * * * *", "interval_s": 5, "run": run})[0][1]
    assert _errors({"cron": "nope", "run": run})[0][0] == ("cron",)
    assert _errors({"cron": "* * * * *", "timezone": "Nowhere/X", "run": run})[0][0] == ("timezone",)
    assert _errors({"interval_s": 0, "run": run})[0][0] == ("interval_s",)
    assert _errors({"interval_s": 5, "run": {**run, "idempotency_key": "k"}})[0][0] == ("run", "idempotency_key")
    assert _errors({"interval_s": 5, "run": run, "overlap": "sometimes"})[0][0] == ("overlap",)


def test_a_patch_is_checked_as_a_whole_and_says_whether_the_cadence_moved():
    spec = ScheduleRequest.model_validate({"cron": "0 2 * * *", "run": {"query": "q"}}).model_dump(mode="json")
    new, moved = merged(spec, SchedulePatch(overlap="allow"))
    assert new.overlap == "allow" and not moved
    new, moved = merged(spec, SchedulePatch.model_validate({"cron": None, "interval_s": 60}))
    assert new.interval_s == 60 and moved
    with pytest.raises(ValidationError):
        merged(spec, SchedulePatch(interval_s=60))  # both


def test_overlap_and_catch_up_decisions():
    assert overlap_action("skip", previous_active=False) == "fire"
    assert overlap_action("skip", previous_active=True) == "skip"
    assert overlap_action("allow", previous_active=True) == "fire"
    assert overlap_action("cancel_previous", previous_active=True) == "cancel_previous"
    assert too_late(100, now=500, catchup_s=300) and not too_late(200, now=500, catchup_s=300)
    assert tick_key("s1", "2027-03-28T01:00:00Z") == "schedule:s1:2027-03-28T01:00:00Z"
