"""Schedules in Redis: the ``schedule:{name}`` hash, the ``schedules`` listing, the
``schedules:due`` set the scheduler reads (see ``shared/keys.py``).

A schedule id is its tenant's: keys and set members use its name ``tenancy.owned_name``
(the id itself for tenant ``default``, ``tenant/id`` for any other), so two tenants may
use one id and never meet. A schedule of another tenant whose hash is at its bare id is
found by its tenant too (its ``tenant`` field decides), and fired, changed and deleted under
the name it is stored as (``ScheduleRecord.name``).

The hash decides; ``schedules:due`` is a hint (id → next tick) that the scheduler repairs
whenever it meets a stale member. A tick is handed on with one compare-and-set script on the
hash (``advance``): only the caller that still sees ``next_tick == tick`` moves it on and
records the outcome (the run it started, or one more skipped tick), so two schedulers, or
one that died half-way and its successor, never count a tick twice. The run of a tick has
its own idempotency key, so it is created once whoever gets there.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, cast

import redis

from reactq.shared.stores.idempotency import write_if_absent
from reactq.shared.stores.runs_index import decode_cursor, encode_cursor
from reactq.shared.keys import Keys
from reactq.shared.tenants.tenancy import DEFAULT_TENANT, owned_name, owner_of, split_owned
from reactq.shared.schedule.models import ScheduleRequest
from reactq.shared.schedule.times import Cadence, iso
from reactq.shared.stores.streams import text

_ADVANCE = """
if redis.call('hget', KEYS[1], 'next_tick') ~= ARGV[1] then return 0 end
redis.call('hset', KEYS[1], 'next_tick', ARGV[2])
if ARGV[3] ~= '' then
  redis.call('hset', KEYS[1], 'last_run_id', ARGV[3], 'last_fired_at', ARGV[4])
  redis.call('hincrby', KEYS[1], 'fired', 1)
end
if tonumber(ARGV[5]) > 0 then redis.call('hincrby', KEYS[1], 'skipped', ARGV[5]) end
if ARGV[6] ~= '' then redis.call('hset', KEYS[1], 'last_error', ARGV[6]) end
return 1
"""


@dataclass
class ScheduleRecord:
    """One stored schedule."""

    schedule_id: str
    spec: dict[str, Any]
    """The ``ScheduleRequest`` as JSON (``paused`` included)."""
    next_tick: int | None
    """The next tick not handled yet (epoch seconds); None while paused."""
    created_at: float = 0.0
    updated_at: float = 0.0
    last_fired_at: float | None = None
    last_run_id: str | None = None
    skipped: int = 0
    fired: int = 0
    last_error: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    tenant: str = DEFAULT_TENANT
    """Who owns the schedule (and the runs it fires)."""
    stored_as: str = ""
    """The name it was read under (its hash's and set members' name)."""

    @property
    def name(self) -> str:
        """The name its keys and set members use (``tenancy.owned_name``, unless it is stored
        under its bare id)."""
        return self.stored_as or owned_name(self.tenant, self.schedule_id)

    @property
    def paused(self) -> bool:
        return bool(self.spec.get("paused"))

    @property
    def cadence(self) -> Cadence:
        return Cadence(cron=self.spec.get("cron"), interval_s=self.spec.get("interval_s"),
                       timezone=self.spec.get("timezone") or "UTC")

    def view(self) -> dict[str, Any]:
        """The public shape (``GET /v1/schedules/{id}`` without its fire times)."""
        return {**self.spec, "schedule_id": self.schedule_id, "tenant": self.tenant,
                "next_tick": None if self.next_tick is None else iso(self.next_tick),
                "last_fired_at": None if self.last_fired_at is None else iso(self.last_fired_at),
                "last_run_id": self.last_run_id, "skipped": self.skipped, "fired": self.fired,
                "last_error": self.last_error, "created_at": self.created_at, "updated_at": self.updated_at}


def _opt_float(v: str | None) -> float | None:
    return float(v) if v else None


def _record(name: str, raw: dict[Any, Any]) -> ScheduleRecord | None:
    f = {text(k): text(v) for k, v in raw.items()}
    if "spec" not in f:
        return None
    schedule_id = split_owned(name)[1]
    return ScheduleRecord(
        schedule_id=schedule_id, spec=json.loads(f["spec"]),
        next_tick=int(f["next_tick"]) if f.get("next_tick") else None,
        created_at=float(f.get("created_at") or 0), updated_at=float(f.get("updated_at") or 0),
        last_fired_at=_opt_float(f.get("last_fired_at")), last_run_id=f.get("last_run_id") or None,
        skipped=int(f.get("skipped") or 0), fired=int(f.get("fired") or 0),
        last_error=f.get("last_error") or None, tenant=owner_of(f.get("tenant")), stored_as=name)


class ScheduleStore:
    """Create, read, change and hand on schedules."""

    def __init__(self, client: redis.Redis, keys: Keys | None = None) -> None:
        self.r = client
        self.keys = keys or Keys()
        self._advance = client.register_script(_ADVANCE)

    # -- the door --------------------------------------------------------------------
    def create(self, req: ScheduleRequest, next_tick: int | None, tenant: str = DEFAULT_TENANT) -> bool:
        """Store a new schedule of ``tenant``; False (nothing written) when the tenant uses
        its id already."""
        now = time.time()
        sid = owned_name(tenant, req.schedule_id)
        fields = {"spec": json.dumps(req.model_dump(mode="json"), ensure_ascii=False), "tenant": tenant,
                  "next_tick": "" if next_tick is None else str(next_tick),
                  "created_at": f"{now:.6f}", "updated_at": f"{now:.6f}", "skipped": 0, "fired": 0}
        if not write_if_absent(self.r, self.keys.schedule(sid), fields):
            return False
        pipe = self.r.pipeline(transaction=False)
        pipe.zadd(self.keys.schedules, {sid: now})
        if next_tick is not None:
            pipe.zadd(self.keys.schedules_due, {sid: next_tick})
        pipe.execute()
        return True

    def get(self, schedule_id: str, tenant: str = DEFAULT_TENANT) -> ScheduleRecord | None:
        """``tenant``'s schedule ``schedule_id`` (None: it has none of that id)."""
        rec = self.named(owned_name(tenant, schedule_id))
        if rec is None and tenant != DEFAULT_TENANT:
            rec = self.named(schedule_id)  # stored under its bare id
        return rec if rec is not None and rec.tenant == tenant else None

    def named(self, name: str) -> ScheduleRecord | None:
        """The schedule of that name (a member of ``schedules:due``)."""
        return _record(name, self.r.hgetall(self.keys.schedule(name)))

    def all(self) -> list[ScheduleRecord]:
        """Every schedule, oldest first."""
        return self._load([text(m) for m in self.r.zrange(self.keys.schedules, 0, -1)])

    def page(self, *, limit: int, cursor: str | None = None) -> tuple[list[ScheduleRecord], str | None]:
        """Up to ``limit`` schedules after ``cursor`` (opaque, from a previous page), oldest
        first, and the next page's cursor (None on the last page)."""
        after = decode_cursor(cursor) if cursor else None
        window = self.r.zrangebyscore(self.keys.schedules, after[0] if after else "-inf", "+inf",
                                      start=0, num=limit + 17, withscores=True)
        cands = [(text(m), float(sc)) for m, sc in cast(list[tuple[Any, float]], window)]
        if after is not None:  # ties (one created_at) come in id order
            cands = [(m, sc) for m, sc in cands if sc > after[0] or m > after[1]]
        shown = cands[:limit]
        more = len(cands) > limit or len(window) == limit + 17
        nxt = encode_cursor(shown[-1][1], shown[-1][0]) if shown and more else None
        return self._load([m for m, _ in shown]), nxt

    def _load(self, ids: list[str]) -> list[ScheduleRecord]:
        """The records of ``ids`` (names), in order; names whose hash is gone leave the listing."""
        pipe = self.r.pipeline(transaction=False)
        for sid in ids:
            pipe.hgetall(self.keys.schedule(sid))
        out, gone = [], []
        for sid, raw in zip(ids, pipe.execute(), strict=True):
            rec = _record(sid, raw)
            if rec is None:
                gone.append(sid)
            else:
                out.append(rec)
        if gone:
            self.r.zrem(self.keys.schedules, *gone)
        return out

    def update(self, req: ScheduleRequest, next_tick: int | None, *, move: bool, name: str | None = None) -> None:
        """Write the changed spec of the schedule ``name`` (``ScheduleRecord.name``; default:
        the id's, tenant ``default``); with ``move`` the next tick too (None: paused), which
        makes a scheduler handing on the old tick lose its compare-and-set."""
        sid = name or req.schedule_id
        mapping: dict[Any, str | int] = {"spec": json.dumps(req.model_dump(mode="json"), ensure_ascii=False),
                                   "updated_at": f"{time.time():.6f}"}
        if move:
            mapping["next_tick"] = "" if next_tick is None else str(next_tick)
        self.r.hset(self.keys.schedule(sid), mapping=mapping)
        if move:
            self.set_due(sid, next_tick)

    def delete(self, name: str) -> bool:
        """Remove the schedule ``name`` (``ScheduleRecord.name``)."""
        schedule_id = name
        pipe = self.r.pipeline(transaction=False)
        pipe.delete(self.keys.schedule(schedule_id))
        pipe.zrem(self.keys.schedules, schedule_id)
        pipe.zrem(self.keys.schedules_due, schedule_id)
        return bool(pipe.execute()[0])

    def note_trigger(self, name: str, run_id: str) -> None:
        """A run started by hand becomes the last run of the schedule ``name``."""
        self.r.hset(self.keys.schedule(name),
                    mapping={"last_run_id": run_id, "last_fired_at": f"{time.time():.6f}"})

    # -- the scheduler ---------------------------------------------------------------
    def due_names(self, now: float, limit: int = 500) -> list[str]:
        """The names (``tenancy.owned_name``) of the schedules whose next tick has come."""
        return [text(m) for m in self.r.zrangebyscore(self.keys.schedules_due, "-inf", now, start=0, num=limit)]

    def next_due(self) -> float | None:
        """The earliest next tick of any schedule (None: nothing is scheduled)."""
        first = self.r.zrange(self.keys.schedules_due, 0, 0, withscores=True)
        return float(first[0][1]) if first else None

    def set_due(self, name: str, tick: int | None) -> None:
        """``name``'s next tick in ``schedules:due`` (None: not due)."""
        if tick is None:
            self.r.zrem(self.keys.schedules_due, name)
        else:
            self.r.zadd(self.keys.schedules_due, {name: tick})

    def advance(self, name: str, tick: int, nxt: int, *, run_id: str | None = None,
                skipped: int = 0, error: str = "") -> bool:
        """Hand tick ``tick`` of the schedule ``name`` (``ScheduleRecord.name``) on to ``nxt``,
        recording the run it started or the ticks it skipped; False (nothing written) when
        someone else already did, or the schedule was changed, paused or deleted meanwhile."""
        done = self._advance(keys=[self.keys.schedule(name)],
                             args=[str(tick), str(nxt), run_id or "", f"{time.time():.6f}", skipped, error[:500]])
        return bool(done)


__all__ = ["ScheduleRecord", "ScheduleStore"]
