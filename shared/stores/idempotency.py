"""Idempotency keys: the same key names the same run (or DAG), which is created once.

A create writes its run or DAG first and claims the key last, with ``SET NX``: a key never
points at something not stored yet, so whoever reads the key finds what it names. The
record and the key live in different slots of a Redis Cluster (see ``keys.py``), so the two
writes cannot be one script; this order makes a creator killed in between harmless.

The id is derived from the key (``idempotent_id``) and the record written only when absent
(``write_if_absent``): a creator killed between the write and the claim leaves the very
record its retry finds and claims, not an orphan beside a second one, and no create ever
rewrites a run that has started. A creator that loses the key to one holding another id
(an explicit id) removes what it wrote and answers with the winner. ``create_once`` is that
path, for runs and DAGs alike.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import redis

from reactq.shared.stores.streams import text


# A fixed namespace: the same key gives the same id in every process and release.
_NAMESPACE = uuid.UUID("0b7c6f52-6a43-4f0e-9d55-3f1f2b7e9a10")

_WRITE_IF_ABSENT = """
if redis.call('exists', KEYS[1]) == 1 then return 0 end
redis.call('hset', KEYS[1], unpack(ARGV))
return 1
"""


def idempotent_id(key: str, *, kind: str = "run", tenant: str = "default") -> str:
    """The id of the run (or DAG: ``kind="dag"``) that idempotency key ``key`` of ``tenant``
    names (``default`` keeps the ids it always had)."""
    scope = "" if tenant == "default" else f"@{tenant}"
    return uuid.uuid5(_NAMESPACE, f"{kind}{scope}:{key}").hex


def write_if_absent(r: redis.Redis, key: str, fields: dict[str, Any]) -> bool:
    """Write hash ``key`` only if it does not exist yet; True when this call wrote it."""
    args = [v for pair in fields.items() for v in pair]
    return bool(r.eval(_WRITE_IF_ABSENT, 1, key, *args))


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


def create_once(r: redis.Redis, new_id: str, fields: dict[Any, Any], *, claim_key: str,
                claim_ttl: int, record_key: Callable[[str], str], due_key: str,
                member: Callable[[str], str], deadline_ms: int,
                index: Callable[[Any, bool], None] | None = None,
                unindex: Callable[[Any], None] | None = None) -> tuple[str, bool]:
    """Create the record ``new_id`` (hash ``record_key(new_id)``, ``fields``) under the
    idempotency key ``claim_key``, once. Returns ``(new_id, True)`` when the key is ours,
    else ``(the holder's id, False)``.

    The record is written only if absent, then ``index(pipe, wrote)`` queues its index rows
    (``wrote`` False: the record was there, a retry), then the key is claimed for
    ``claim_ttl`` seconds. Ours: the record is due (``member(id)`` in ``due_key`` at
    ``deadline_ms``); lost: a holder still queued is armed again, and a record this call wrote
    under another id is removed (with the rows ``unindex(pipe)`` queues)."""
    key = record_key(new_id)
    wrote = write_if_absent(r, key, fields)
    if index is not None:
        pipe = r.pipeline(transaction=False)
        index(pipe, wrote)
        pipe.execute()
    existing = claim(r, claim_key, new_id, claim_ttl)
    if existing is None:
        r.zadd(due_key, {member(new_id): deadline_ms})
        return new_id, True
    arm_if_queued(r, record_key(existing), due_key, member(existing), deadline_ms)
    if existing != new_id and wrote:  # lost to a record with another id: remove ours
        pipe = r.pipeline(transaction=False)
        pipe.delete(key)
        if unindex is not None:
            unindex(pipe)
        pipe.execute()
    return existing, False
