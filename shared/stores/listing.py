"""The indexes behind ``GET /v1/dags`` and ``GET /v1/batches``: one sorted set each, ids by
``created_at``, read newest first a page at a time with the cursors of ``GET /v1/runs``.

The member is added *before* the object's hash is written (another slot on a Redis Cluster,
so not in one script): a crash in between leaves a member whose hash does not exist, which
the first listing that meets it drops — never an object the listing cannot find. Members
whose hash expired are dropped the same way; members older than twice the objects' TTL are
pruned at each add.

A listing reads candidates from the set, loads their hashes in one pipeline and keeps the
rows whose status matches the filter (as the hash says now), reading on until the page is
full or ``MAX_SCANNED`` candidates were read (then it hands back a cursor to go on from).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis

from reactq.shared.errors import RequestError
from reactq.shared.keys import Keys
from reactq.shared.stores.runs_index import MAX_LIMIT, MAX_SCANNED, decode_cursor, encode_cursor
from reactq.shared.tenants.tenancy import owner_of

__all__ = ["BATCH_FIELDS", "DAG_FIELDS", "ObjectIndex", "batch_index", "batch_row", "dag_index", "dag_row"]

#: Characters of a DAG's goal a listing row shows.
GOAL_CHARS = 200


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


@dataclass(frozen=True)
class ObjectIndex:
    """One index: its set, how to name an object's hash, which hash fields make a row."""

    r: redis.Redis
    key: str
    hash_key: Callable[[str], str]
    fields: Sequence[str]
    id_field: str
    ttl: int = 86400

    def add(self, object_id: str, created_at: float | None = None) -> None:
        """Index ``object_id`` (call before writing its hash); prunes very old members."""
        now = time.time() if created_at is None else created_at
        pipe = self.r.pipeline(transaction=False)
        pipe.zadd(self.key, {object_id: now}, nx=True)
        pipe.zremrangebyscore(self.key, "-inf", f"({now - 2 * self.ttl}")
        pipe.execute()

    def page(self, *, status: str | None = None, limit: int = 50, cursor: str | None = None,
             tenant: str | None = None) -> dict[str, Any]:
        """``{rows: [...], next_cursor}``, newest first; ``next_cursor`` None at the end.
        ``tenant``: only that tenant's objects (None: every tenant's, for an admin)."""
        if not 1 <= limit <= MAX_LIMIT:
            raise RequestError(f"limit must be between 1 and {MAX_LIMIT}", field="limit")
        after = decode_cursor(cursor) if cursor else None
        rows: list[dict[str, Any]] = []
        scanned = 0
        last = after
        while len(rows) < limit and scanned < MAX_SCANNED:
            exact = status is None and tenant is None
            cands = self._candidates(after, limit if exact else max(limit * 2, 50))
            if not cands:
                return {"rows": rows, "next_cursor": None}
            for (oid, score), row in zip(cands, self._load([c[0] for c in cands]), strict=True):
                scanned += 1
                last = (score, oid)
                if row is not None and (status is None or row.get("status") == status) \
                        and (tenant is None or owner_of(row.get("tenant")) == tenant):
                    rows.append(row)
                    if len(rows) == limit:
                        break
            after = last
        return {"rows": rows, "next_cursor": encode_cursor(*last) if last is not None else None}

    def _candidates(self, after: tuple[float, str] | None, chunk: int) -> list[tuple[str, float]]:
        """Up to ``chunk`` members strictly after ``after`` in (score desc, id desc) order."""
        top: float | str = "+inf" if after is None else after[0]
        extra = 16
        while True:
            window = self.r.zrevrangebyscore(self.key, top, "-inf", start=0, num=chunk + extra, withscores=True)
            cands = [(_s(m), float(sc)) for m, sc in cast(list[tuple[Any, float]], window)]
            if after is not None:
                cands = [(m, sc) for m, sc in cands if sc < after[0] or (sc == after[0] and m < after[1])]
            if cands or len(window) < chunk + extra:
                return cands[:chunk]
            extra *= 4

    def _load(self, ids: list[str]) -> list[dict[str, Any] | None]:
        """Each id's row (None when its hash is gone: the member is removed)."""
        pipe = self.r.pipeline(transaction=False)
        for oid in ids:
            pipe.hmget(self.hash_key(oid), list(self.fields))
        out: list[dict[str, Any] | None] = []
        gone: list[str] = []
        for oid, values in zip(ids, pipe.execute(), strict=True):
            f = {name: None if v is None else _s(v) for name, v in zip(self.fields, values, strict=True)}
            if f.get("status") is None:
                gone.append(oid)
                out.append(None)
                continue
            out.append({self.id_field: oid, **f})
        if gone:
            self.r.zrem(self.key, *gone)
        return out


DAG_FIELDS = ("status", "phase", "created_at", "updated_at", "request", "tenant")
BATCH_FIELDS = ("status", "total", "created_at", "updated_at", "tenant")


def dag_index(r: redis.Redis, keys: Keys, ttl: int = 86400) -> ObjectIndex:
    return ObjectIndex(r, keys.dags_index, keys.dag, DAG_FIELDS, "dag_id", ttl)


def batch_index(r: redis.Redis, keys: Keys, ttl: int = 86400) -> ObjectIndex:
    return ObjectIndex(r, keys.batches_index, keys.batch, BATCH_FIELDS, "batch_id", ttl)


def dag_row(raw: dict[str, Any]) -> dict[str, Any]:
    """A ``GET /v1/dags`` row from the hash fields (the goal cut to ``GOAL_CHARS``)."""
    goal = str(json.loads(raw.get("request") or "{}").get("goal", ""))
    return {"dag_id": raw["dag_id"], "status": raw["status"], "phase": raw.get("phase"),
            "goal": goal if len(goal) <= GOAL_CHARS else goal[:GOAL_CHARS - 1] + "…",
            "created_at": float(raw.get("created_at") or 0), "updated_at": float(raw.get("updated_at") or 0)}


def batch_row(raw: dict[str, Any]) -> dict[str, Any]:
    """A ``GET /v1/batches`` row from the hash fields."""
    return {"batch_id": raw["batch_id"], "status": raw["status"], "total": int(raw.get("total") or 0),
            "created_at": float(raw.get("created_at") or 0), "updated_at": float(raw.get("updated_at") or 0)}
