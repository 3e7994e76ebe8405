"""The run index behind ``GET /v1/runs``: sorted sets of run ids, newest first, no SCAN.

Written by the run store's Lua scripts (``shared/stores/runs.py``), in the same script as the run
itself, so the index never names a run that was not stored:

* ``runs`` — every run, score = ``created_at`` (pruned at each create, as before);
* ``runs:status:{status}`` — moved from set to set by ``commit`` when the status changes;
* ``runs:batch:{id}`` / ``runs:thread:{tid}`` / ``runs:schedule:{name}`` — written at create for
  a run that belongs to an HTTP batch, carries a ``thread_id`` or was started by a schedule
  (a thread's and a schedule's under its tenant's name for it, ``tenancy.owned_name``);
  their TTL is refreshed at each create.

A listing reads one set (the most selective filter: batch, thread, status, else all), then
the candidates' run hashes, and keeps those that match *every* filter as the run hash says
now — so a status set a crash left stale can only cost a little scanning, never a wrong
row. A run whose hash expired (its TTL ran out) is dropped from the set it was met in: the
index expires with the runs, lazily, without SCAN.

The cursor is opaque (``base64("score:run_id")``): the next page starts strictly after the
last row shown, in (score desc, run_id desc) order — the order of ``ZREVRANGEBYSCORE``.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any, cast

import redis

from reactq.shared.errors import RequestError
from reactq.shared.keys import Keys
from reactq.shared.tenants.tenancy import DEFAULT_TENANT, owned_name, thread_key

QUERY_CHARS = 200  # the listing shows the start of each query, not 100,000 characters
MAX_LIMIT = 500
# One listing reads at most this many candidates (filters that match little stop early
# and hand back a cursor to go on from, rather than walking a huge set in one request).
MAX_SCANNED = 5000
_FIELDS = ("status", "created_at", "updated_at", "request", "result", "batch_id", "schedule_id", "scheduled_for",
           "tenant", "forked_from")


@dataclass(frozen=True)
class RunFilter:
    status: str | None = None
    batch_id: str | None = None
    thread_id: str | None = None
    schedule_id: str | None = None
    tenant: str | None = None
    """Only this tenant's runs (None: every tenant's, for an admin)."""
    forked_from: str | None = None
    """Only the forks of this run."""


def encode_cursor(score: float, run_id: str) -> str:
    return base64.urlsafe_b64encode(f"{score!r}:{run_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """``(score, run_id)``; a ``RequestError`` naming ``cursor`` for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        score, run_id = raw.split(":", 1)
        return float(score), run_id
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise RequestError("not a cursor this server handed out", field="cursor") from exc


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def summary(run_id: str, fields: dict[str, str | None]) -> dict[str, Any]:
    """One row of the listing, from the run hash's fields."""
    request = json.loads(fields.get("request") or "{}")
    raw_result = fields.get("result")
    result = json.loads(raw_result) if raw_result else {}
    query = str(request.get("query", ""))
    return {
        "run_id": run_id,
        "status": fields["status"],
        "model": result.get("model") or request.get("model"),
        "query": query if len(query) <= QUERY_CHARS else query[:QUERY_CHARS - 1] + "…",
        "iterations": result.get("iterations", 0),
        "usage": result.get("usage"),
        "created_at": float(fields["created_at"] or 0),
        "updated_at": float(fields["updated_at"] or 0),
        "batch_id": fields.get("batch_id"),
        "thread_id": request.get("thread_id"),
        "schedule_id": fields.get("schedule_id"),
        "scheduled_for": fields.get("scheduled_for"),
        "tenant": fields.get("tenant") or DEFAULT_TENANT,
        "forked_from": json.loads(forked) if (forked := fields.get("forked_from")) else None,
    }


def _matches(f: RunFilter, row: dict[str, Any]) -> bool:
    return ((f.status is None or row["status"] == f.status)
            and (f.batch_id is None or row["batch_id"] == f.batch_id)
            and (f.thread_id is None or row["thread_id"] == f.thread_id)
            and (f.schedule_id is None or row["schedule_id"] == f.schedule_id)
            and (f.tenant is None or row["tenant"] == f.tenant)
            and (f.forked_from is None or (row["forked_from"] or {}).get("run_id") == f.forked_from))


class RunsIndex:
    """Reads the index (the writes are the run store's scripts)."""

    def __init__(self, client: redis.Redis, keys: Keys | None = None) -> None:
        self.r = client
        self.keys = keys or Keys()

    def set_for(self, f: RunFilter) -> str:
        if f.forked_from is not None:
            return self.keys.runs_forked_from(f.forked_from)
        if f.batch_id is not None:
            return self.keys.runs_batch(f.batch_id)
        if f.thread_id is not None:
            return self.keys.runs_thread(thread_key(f.tenant or DEFAULT_TENANT, f.thread_id))
        if f.schedule_id is not None:
            return self.keys.runs_schedule(owned_name(f.tenant or DEFAULT_TENANT, f.schedule_id))
        if f.tenant is not None and f.tenant != DEFAULT_TENANT:
            # ``default``'s runs include those made before tenants: the whole index, filtered.
            return self.keys.runs_tenant(f.tenant)
        if f.status is not None:
            return self.keys.runs_status(f.status)
        return self.keys.runs

    def page(self, f: RunFilter, *, limit: int = 50, cursor: str | None = None) -> dict[str, Any]:
        """``{runs: [...], next_cursor}``, newest first; ``next_cursor`` None at the end."""
        if not 1 <= limit <= MAX_LIMIT:
            raise RequestError(f"limit must be between 1 and {MAX_LIMIT}", field="limit")
        key = self.set_for(f)
        top: float | str = "+inf"
        after: tuple[float, str] | None = None
        if cursor:
            after = decode_cursor(cursor)
            top = after[0]
        rows: list[dict[str, Any]] = []
        scanned = 0
        last: tuple[float, str] | None = after
        # With at most one filter that the set itself answers (batch, thread, none), every
        # live candidate is a row: read no more than the page. Otherwise expect misses.
        exact = (f.status is None and f.tenant != DEFAULT_TENANT
                 and sum(x is not None for x in (f.batch_id, f.thread_id, f.schedule_id, f.tenant, f.forked_from)) <= 1)
        while len(rows) < limit and scanned < MAX_SCANNED:
            chunk = limit if exact else max(limit * 2, 50)
            cands = self._candidates(key, top, after, chunk)
            if not cands:
                return {"runs": rows, "next_cursor": None}
            for run_id, row in self._load(key, cands):
                scanned += 1
                last = (row.pop("_score"), run_id)
                if row.get("status") is not None and _matches(f, row):
                    rows.append(row)
                    if len(rows) == limit:
                        break
            assert last is not None
            after, top = last, last[0]
        return {"runs": rows, "next_cursor": encode_cursor(*last) if last is not None else None}

    def _candidates(self, key: str, top: float | str, after: tuple[float, str] | None,
                    chunk: int) -> list[tuple[str, float]]:
        """Up to ``chunk`` members strictly after ``after`` in (score desc, id desc) order.

        Ties (one score, several ids) come in descending id order from ``top`` down; those
        already shown are skipped, reading further while a whole window was ties."""
        extra = 16
        while True:
            window = self.r.zrevrangebyscore(key, top, "-inf", start=0, num=chunk + extra, withscores=True)
            cands = [(_s(m), float(sc)) for m, sc in cast(list[tuple[Any, float]], window)]
            if after is not None:
                cands = [(m, sc) for m, sc in cands if sc < after[0] or (sc == after[0] and m < after[1])]
            if cands or len(window) < chunk + extra:
                return cands[:chunk]
            extra *= 4

    def one(self, run_id: str) -> dict[str, Any] | None:
        """One run's row with its whole query (the viewer's run page header); None if gone."""
        values = self.r.hmget(self.keys.run(run_id), list(_FIELDS))
        fields = {name: None if v is None else _s(v) for name, v in zip(_FIELDS, values, strict=True)}
        if fields["status"] is None:
            return None
        row = summary(run_id, fields)
        row["query"] = str(json.loads(fields.get("request") or "{}").get("query", ""))
        return row

    def _load(self, key: str, cands: list[tuple[str, float]]) -> list[tuple[str, dict[str, Any]]]:
        """The candidates' rows, in order; members whose run expired are removed from ``key``."""
        pipe = self.r.pipeline(transaction=False)
        for run_id, _ in cands:
            pipe.hmget(self.keys.run(run_id), list(_FIELDS))
        out: list[tuple[str, dict[str, Any]]] = []
        gone: list[str] = []
        for (run_id, score), values in zip(cands, pipe.execute(), strict=True):
            fields = {name: None if v is None else _s(v) for name, v in zip(_FIELDS, values, strict=True)}
            if fields["status"] is None:
                gone.append(run_id)
                out.append((run_id, {"_score": score, "status": None}))
                continue
            row = summary(run_id, fields)
            row["_score"] = score
            out.append((run_id, row))
        if gone:
            self.r.zrem(key, *gone)
        return out


__all__ = ["RunFilter", "RunsIndex", "decode_cursor", "encode_cursor", "summary"]
