"""Resend and crash counts of due work (``workers/recovery/watchdog.py``): how often the
current step of a due member was sent again, and how many of those sends followed a crash,
kept in a field of the owner's hash (a run's ``due_n`` / ``due_n:{call_id}``: ``RunStore``;
a DAG's or a webhook message's ``due_n``). A new step counts from zero again."""

from __future__ import annotations

import json

import redis

#: The owner's field for its own next step; a tool call's is ``due_n:{call_id}``.
FIELD = "due_n"


def count_crash(client: redis.Redis, hash_key: str, field: str, step: int, died: bool) -> int:
    """Count one resend (and a crash if ``died``) of ``step``; returns the crashes so far."""
    raw = client.hget(hash_key, field)
    rec: dict[str, int] = json.loads(raw) if raw else {}
    if rec.get("step") != step:
        rec = {"step": step, "resends": 0, "crashes": 0}
    rec["resends"] += 1
    rec["crashes"] += int(died)
    client.hset(hash_key, field, json.dumps(rec))
    return rec["crashes"]
