"""A stream append that refuses once the stream holds ``limit`` entries (one Lua call, so two
concurrent appends cannot both slip under the limit). Used for follow-up messages, which a
run keeps for its whole life: without a cap one client could grow them without end."""

from __future__ import annotations

from typing import Any

import redis

from reactq.shared.errors import TooManyRequests

# KEYS[1] stream; ARGV[1] limit, then field, value pairs. Returns the new id or false.
_ADD = """
if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[1]) then return false end
local fields = {}
for i = 2, #ARGV do fields[#fields + 1] = ARGV[i] end
return redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[1], '*', unpack(fields))
"""


def capped_xadd(r: redis.Redis, key: str, fields: dict[str, str], limit: int, what: str) -> str:
    """XADD ``fields`` to ``key`` unless it already holds ``limit`` entries (``TooManyRequests``)."""
    flat: list[Any] = [limit]
    for k, v in fields.items():
        flat += [k, v]
    new_id = r.eval(_ADD, 1, key, *flat)
    if not new_id:
        raise TooManyRequests(f"{what}: at most {limit} per run (REACTQ_MAX_INTERRUPTS)", field="content")
    return new_id.decode() if isinstance(new_id, bytes) else str(new_id)
