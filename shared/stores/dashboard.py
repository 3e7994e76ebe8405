"""The reads behind the viewer's dashboard: the last hour's runs and the turn-time histogram.

Two pipelined round trips, bounded whatever the traffic:

1. the ids of the runs created in the last hour (newest first, at most ``cap``) from the
   run index (the tenant's set, or every run's), the ``turn_seconds`` hashes (every shard)
   and the size of the in-flight hashes;
2. those runs' ``status``, ``created_at``, ``tenant`` and ``result`` fields.

The computation is ``reactq.shared.observe.dashboard``'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

import redis

from reactq.shared.observe.dashboard import WINDOW_S, RunPoint, merge_buckets, run_point
from reactq.shared.keys import Keys
from reactq.shared.observe.metrics_schema import INFLIGHT
from reactq.shared.stores.runs_index import RunFilter, RunsIndex
from reactq.shared.tenants.tenancy import DEFAULT_TENANT

#: At most this many runs are read (the newest of the hour); a busier hour says ``truncated``.
MAX_RUNS = 2000
_FIELDS = ("status", "created_at", "tenant", "result")


@dataclass(frozen=True)
class Reading:
    points: list[RunPoint]
    truncated: bool
    turn_buckets: dict[str, float] | None
    in_flight: int | None


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _decode_hash(raw: dict[Any, Any]) -> list[tuple[list[str], float]]:
    out: list[tuple[list[str], float]] = []
    for k, v in raw.items():
        try:
            out.append(([str(x) for x in json.loads(_s(k))], float(_s(v))))
        except (ValueError, TypeError):
            continue  # not ours: one odd field never spoils the figures
    return out


class DashboardStore:
    """Reads what the dashboard shows; writes nothing."""

    def __init__(self, client: redis.Redis, keys: Keys | None = None, *, cap: int = MAX_RUNS) -> None:
        self.r = client
        self.keys = keys or Keys()
        self.cap = cap

    def read(self, now: float, *, tenant: str | None, cluster: bool) -> Reading:
        """The last hour's runs of ``tenant`` (None: every tenant's); with ``cluster``, the
        cluster-wide figures too (turn times, runs in flight)."""
        index_key = RunsIndex(self.r, self.keys).set_for(RunFilter(tenant=tenant))
        turn_keys = self.keys.metrics_all("turn_seconds") if cluster else []
        inflight_keys = self.keys.metrics_all(INFLIGHT) if cluster else []
        pipe = self.r.pipeline(transaction=False)
        pipe.zrevrangebyscore(index_key, "+inf", now - WINDOW_S, start=0, num=self.cap + 1)
        for key in turn_keys:
            pipe.hgetall(key)
        for key in inflight_keys:
            pipe.hlen(key)
        values = pipe.execute()
        ids = [_s(m) for m in cast(list[Any], values[0])]
        truncated = len(ids) > self.cap
        ids = ids[:self.cap]
        turn_raw = values[1:1 + len(turn_keys)]
        buckets = None
        if cluster:
            # every label set's buckets (and ``sum``) added up, over every shard
            buckets = merge_buckets(f for raw in turn_raw for f in _decode_hash(cast(dict[Any, Any], raw)))
        in_flight = sum(int(v) for v in values[1 + len(turn_keys):]) if cluster else None
        return Reading(self._points(ids, tenant), truncated, buckets, in_flight)

    def _points(self, ids: list[str], tenant: str | None) -> list[RunPoint]:
        if not ids:
            return []
        pipe = self.r.pipeline(transaction=False)
        for run_id in ids:
            pipe.hmget(self.keys.run(run_id), list(_FIELDS))
        out: list[RunPoint] = []
        for values in pipe.execute():
            fields = {name: None if v is None else _s(v) for name, v in zip(_FIELDS, values, strict=True)}
            if tenant is not None and (fields["tenant"] or DEFAULT_TENANT) != tenant:
                continue
            point = run_point(fields)
            if point is not None:
                out.append(point)
        return out


__all__ = ["MAX_RUNS", "DashboardStore", "Reading"]
