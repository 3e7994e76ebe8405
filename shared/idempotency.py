"""Idempotency keys: the same key names the same run (or DAG), which is created once.

A create writes its run or DAG first and claims the key last, with ``SET NX``: a key never
points at something not stored yet, so whoever reads the key finds what it names. A creator
that loses the key to an earlier one removes what it wrote and answers with the winner. The
record and the key live in different slots of a Redis Cluster (see ``keys.py``), so the two
writes cannot be one script; this order makes a creator killed in between harmless.
"""

from __future__ import annotations

import redis

from reactq.shared.streams import text


def arm_if_queued(r: redis.Redis, record_key: str, due_key: str, member: str, deadline_ms: int) -> None:
    """Make a still-queued winner due again: it may have been killed between its claim and
    its due entry (a second send of a first step is harmless: CAS on the step)."""
    if text(r.hget(record_key, "status") or b"") == "queued":
        r.zadd(due_key, {member: deadline_ms}, nx=True)


def claim(r: redis.Redis, key: str, owner: str, ttl_seconds: int) -> str | None:
    """Claim ``key`` for ``owner``: None once it is ours, else the id that holds it."""
    while True:  # the key may expire between SET NX and GET: claim again
        if r.set(key, owner, nx=True, ex=ttl_seconds):
            return None
        existing = r.get(key)
        if existing is not None:
            return text(existing)
