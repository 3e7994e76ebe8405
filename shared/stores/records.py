"""What the gateway's async routes read of a record's hash — a run, a DAG, a batch, a
schedule, a webhook delivery: whether it exists and whose it is (``dispatcher/http/auth.py``), its status (the
SSE routes, to end a stream), and where its events are.

The gateway's clients are ``redis.asyncio`` ones, made per event loop: a ``Record`` names the
keys and is handed the client of the request that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis

from reactq.shared.keys import Keys
from reactq.shared.stores.streams import text
from reactq.shared.tenants.tenancy import owner_of


@dataclass(frozen=True)
class Record:
    """One stored record by its kind (``what``, as messages name it) and id."""

    what: str
    ident: str
    hash_key: str
    events_key: str = ""
    """Its events stream (runs and DAGs)."""
    present: str = "status"
    """The field every such record has (absent: no such record, or it expired)."""

    async def owner(self, r: aioredis.Redis) -> str | None:
        """The record's tenant; None when there is no such record."""
        found, tenant = await r.hmget(self.hash_key, [self.present, "tenant"])
        return None if found is None else owner_of(tenant)

    async def status(self, r: aioredis.Redis) -> str | None:
        raw = await r.hget(self.hash_key, "status")
        return None if raw is None else text(raw)


def run_record(keys: Keys, run_id: str) -> Record:
    return Record("run", run_id, keys.run(run_id), keys.run_events(run_id))


def dag_record(keys: Keys, dag_id: str) -> Record:
    return Record("DAG", dag_id, keys.dag(dag_id), keys.dag_events(dag_id))


def batch_record(keys: Keys, batch_id: str) -> Record:
    return Record("batch", batch_id, keys.batch(batch_id))
