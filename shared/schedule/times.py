"""Fire times of a schedule, pure: cron expressions in an IANA zone, or fixed intervals.

A tick is a whole number of seconds since the epoch (UTC). Two cadences:

* ``interval_s``: ticks at every multiple of the interval since the epoch (``k × interval``),
  so every process computes the same ticks with no stored anchor.
* ``cron``: 5 fields, or 6 with seconds first. Times are wall-clock times in the schedule's
  zone. croniter walks *naive* wall-clock times (no zone, so no DST of its own); each is then
  placed on the time line with ``zoneinfo``:

  - a time that occurs twice (DST fall-back) fires once, at its first occurrence;
  - a time that does not exist (spring-forward) fires once, at the first instant after the
    gap (``30 2 * * *`` in Europe/Berlin fires at 01:00 UTC on 2027-03-28, when the clocks
    show 03:00); several times inside one gap collapse into that one instant.

  The mapping never goes backwards, so the walk from a wall-clock time finds every tick after
  the matching instant in order.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter.croniter import CroniterBadDateError

#: A schedule whose next fire is further than this is refused (it would never fire).
MAX_YEARS_AHEAD = 5


@dataclass(frozen=True)
class Cadence:
    """When a schedule fires: exactly one of ``cron`` and ``interval_s``."""

    cron: str | None = None
    interval_s: int | None = None
    timezone: str = "UTC"


def check_cron(expr: str) -> str:
    """``expr`` normalised (single spaces); ``ValueError`` saying what is wrong."""
    fields = expr.split()
    if len(fields) not in (5, 6):
        raise ValueError(f"a cron expression has 5 fields (6 with seconds first), got {len(fields)}")
    norm = " ".join(fields)
    if not croniter.is_valid(norm, second_at_beginning=len(fields) == 6):
        raise ValueError(f"not a valid cron expression: {norm[:80]!r}")
    try:
        _walk(norm, datetime(2026, 1, 1)).__next__()
    except (CroniterBadDateError, StopIteration) as exc:
        raise ValueError(f"the cron expression {norm[:80]!r} never fires") from exc
    return norm


def check_zone(name: str) -> str:
    """``name`` if it is an IANA zone this machine knows; ``ValueError`` otherwise."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown IANA time zone {name[:80]!r} (e.g. 'Europe/Berlin', 'UTC')") from exc
    return name


def _walk(expr: str, start: datetime) -> Iterator[datetime]:
    """Naive wall-clock times after naive ``start`` matching ``expr``, in order."""
    it = croniter(expr, start, second_at_beginning=len(expr.split()) == 6,
                  max_years_between_matches=MAX_YEARS_AHEAD)
    while True:
        yield it.get_next(datetime)


def _gap_end(local: datetime, zone: ZoneInfo) -> int:
    """The transition instant (epoch s) that skipped naive wall time ``local``: the first
    instant after the gap. Bisects between the two readings of ``local``."""
    lo = int(local.replace(tzinfo=zone, fold=1).timestamp())  # read with the later offset
    hi = int(local.replace(tzinfo=zone, fold=0).timestamp())  # read with the earlier offset
    lo, hi = min(lo, hi), max(lo, hi)
    before = datetime.fromtimestamp(lo, zone).utcoffset()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, zone).utcoffset() == before:
            lo = mid
        else:
            hi = mid
    return hi


def place(local: datetime, zone: ZoneInfo) -> int:
    """Naive wall-clock time ``local`` in ``zone`` as a tick (epoch seconds): the first
    occurrence of a repeated time, the end of the gap for a skipped one."""
    aware = local.replace(tzinfo=zone, fold=0)
    ts = aware.timestamp()
    if datetime.fromtimestamp(ts, zone).replace(tzinfo=None) != local:
        return _gap_end(local, zone)
    return int(ts)


def next_after(c: Cadence, t: float) -> int:
    """The first tick strictly after instant ``t`` (epoch seconds)."""
    if c.interval_s is not None:
        return (math.floor(t / c.interval_s) + 1) * c.interval_s
    assert c.cron is not None
    zone = ZoneInfo(c.timezone)
    wall = datetime.fromtimestamp(math.floor(t), zone).replace(tzinfo=None)
    for local in _walk(c.cron, wall):
        tick = place(local, zone)
        if tick > t:
            return tick
    raise AssertionError("unreachable: the walk is endless")  # pragma: no cover


def fire_times(c: Cadence, after: float, count: int) -> list[int]:
    """The next ``count`` ticks strictly after ``after``."""
    out: list[int] = []
    t = after
    for _ in range(count):
        t = next_after(c, t)
        out.append(int(t))
    return out


def count_until(c: Cadence, first: int, end: float, *, limit: int = 100_000) -> tuple[int, int]:
    """``(n, nxt)``: the ticks from ``first`` (a tick) up to but not including ``end`` number
    ``n``, and ``nxt`` is the first tick at or after ``end``. A long outage of a seconds cron
    is counted up to ``limit`` ticks one by one, the rest of the way jumped over."""
    if first >= end:
        return 0, first
    if c.interval_s is not None:
        nxt = math.ceil(end / c.interval_s) * c.interval_s
        return (nxt - first) // c.interval_s, nxt
    n, tick = 0, first
    while tick < end and n < limit:
        n, tick = n + 1, next_after(c, tick)
    if tick < end:
        tick = next_after(c, math.ceil(end) - 1)
    return n, tick


def iso(tick: float) -> str:
    """A tick as ISO-8601 UTC, ``2027-03-28T01:00:00Z``."""
    return datetime.fromtimestamp(tick, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_instant(text: str) -> float:
    """An ISO-8601 instant (a naive one is UTC) as epoch seconds; ``ValueError`` otherwise."""
    raw = text.strip()
    if raw.endswith(("Z", "z")):
        raw = raw[:-1] + "+00:00"
    dt = datetime.fromisoformat(raw)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


__all__ = ["Cadence", "check_cron", "check_zone", "count_until", "fire_times", "iso", "next_after",
           "parse_instant", "place"]
