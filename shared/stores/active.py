"""A tenant's active runs, for ``max_active_runs`` (``tenant:{t}:active``, zset: run id →
admitted at).

``admit`` adds a run only while the tenant holds fewer than its maximum (one script: two
doors racing cannot both take the last place). Runs leave when they are found ended: a door
at the limit checks its members' status once (one pipelined read) and drops those that
ended or expired — so a worker that died before saying so never holds a place forever.
"""

from __future__ import annotations

import time

import redis

from reactq.shared.keys import Keys
from reactq.shared.stores.streams import text

__all__ = ["ActiveRuns"]

TERMINAL = ("succeeded", "failed", "cancelled")

_ADMIT = """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 1 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
"""


class ActiveRuns:
    def __init__(self, client: redis.Redis, keys: Keys | None = None) -> None:
        self.r = client
        self.keys = keys or Keys()
        self._admit = client.register_script(_ADMIT)

    def admit(self, tenant: str, run_id: str, limit: int) -> bool:
        """Take a place for ``run_id`` (True), or None is free even after dropping the runs
        that ended (False)."""
        key = self.keys.tenant_active(tenant)
        if self._try(key, run_id, limit):
            return True
        return self.prune(tenant) > 0 and self._try(key, run_id, limit)

    def _try(self, key: str, run_id: str, limit: int) -> bool:
        return bool(self._admit(keys=[key], args=[run_id, limit, f"{time.time():.3f}"]))

    def release(self, tenant: str, run_id: str) -> None:
        self.r.zrem(self.keys.tenant_active(tenant), run_id)

    def prune(self, tenant: str) -> int:
        """Drop the members that ended or expired; how many were dropped."""
        key = self.keys.tenant_active(tenant)
        members = [text(m) for m in self.r.zrange(key, 0, -1)]
        if not members:
            return 0
        pipe = self.r.pipeline(transaction=False)
        for rid in members:
            pipe.hget(self.keys.run(rid), "status")
        ended = [rid for rid, st in zip(members, pipe.execute(), strict=True)
                 if st is None or text(st) in TERMINAL]
        if ended:
            self.r.zrem(key, *ended)
        return len(ended)

    def count(self, tenant: str) -> int:
        return int(self.r.zcard(self.keys.tenant_active(tenant)))
