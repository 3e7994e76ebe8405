"""A run as the protocol doors read it: its status and result, its events, its approvals.

``RunView`` pairs the sync ``Dispatcher`` (status, approvals, cancel, decisions) with an async
Redis client for the blocking reads of the run's event stream, so a waiting request holds a
connection, not a thread. The state is the run's own, in Redis: any gateway replica (or the
stdio server) reads the same.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass
from typing import Any, cast

import redis.asyncio as aioredis

from reactq.dispatcher.client import Dispatcher
from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.errors import RunNotFound
from reactq.shared.events import Event
from reactq.shared.stores.keys import Caller
from reactq.shared.stores.records import run_record
from reactq.shared.stores.streams import text

__all__ = ["RunView", "Snapshot"]

#: How long one blocking read of a run's stream waits before the status is looked at again.
BLOCK_MS = 1000


@dataclass(frozen=True)
class Snapshot:
    """A run's status (``queued`` … ``succeeded``), stored result, request and creation time."""

    run_id: str
    status: str
    created_at: float
    result: dict[str, Any] | None
    request: dict[str, Any]
    tenant: str
    updated_at: float = 0.0

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL_STATUSES


class RunView:
    """Reads and acts on runs for a protocol door."""

    def __init__(self, d: Dispatcher, ar: aioredis.Redis) -> None:
        self.d = d
        self.ar = ar

    async def visible(self, run_id: str, caller: Caller) -> bool:
        """Whether ``run_id`` exists and the caller may see it (another tenant's: no)."""
        owner = await run_record(self.d.keys, run_id).owner(self.ar)
        return owner is not None and caller.sees(owner)

    async def snapshot(self, run_id: str) -> Snapshot:
        """The run now (``RunNotFound`` when it does not exist or expired)."""
        import json

        raw = await self.ar.hmget(run_record(self.d.keys, run_id).hash_key, ["status", "created_at", "result", "request", "tenant",
                                                                 "updated_at"])
        if raw[0] is None:
            raise RunNotFound(f"no run with id {run_id!r} (it may have expired)")
        status, created, result, request, tenant, updated = (None if v is None else text(v) for v in raw)
        return Snapshot(run_id, status or "queued", float(created or 0), json.loads(result) if result else None,
                        json.loads(request) if request else {}, tenant or "default", float(updated or created or 0))

    async def events(self, run_id: str, after: str | None = None, *, block_ms: int | None = None,
                     count: int = 500) -> list[tuple[str, Event]]:
        """Events after stream id ``after`` (None: from the start); ``block_ms``: wait for one."""
        key = run_record(self.d.keys, run_id).events_key
        if block_ms is None:
            raw: list[Any] = await self.ar.xrange(key, min=f"({after}" if after else "-", count=count) or []
        else:
            res = cast(list[Any], await self.ar.xread({key: after or "0-0"}, block=block_ms, count=count))
            raw = res[0][1] if res else []
        return [(text(i), Event.from_fields(f)) for i, f in raw]

    async def all_events(self, run_id: str) -> list[tuple[str, Event]]:
        """Every event of the run's stream, oldest first."""
        out: list[tuple[str, Event]] = []
        while True:
            page = await self.events(run_id, out[-1][0] if out else None)
            out += page
            if len(page) < 500:
                return out

    async def follow(self, run_id: str, after: str | None = None) -> AsyncIterator[tuple[str, Event] | None]:
        """The events after ``after`` as they come, up to ``done``; ``None`` after each quiet
        spell (a caller's chance to send a keep-alive or look at the status)."""
        cursor = after
        while True:
            batch = await self.events(run_id, cursor, block_ms=BLOCK_MS)
            if not batch:
                yield None
                continue
            for sid, event in batch:
                cursor = sid
                yield sid, event
                if event.channel == "done":
                    return

    async def wait(self, run_id: str, statuses: Collection[str], timeout: float | None = None) -> Snapshot:
        """The run once its status is in ``statuses`` or it ended (or at ``timeout`` seconds)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        tail = await self.ar.xrevrange(run_record(self.d.keys, run_id).events_key, count=1)
        cursor = text(tail[0][0]) if tail else "0-0"
        while True:
            snap = await self.snapshot(run_id)
            if snap.ended or snap.status in statuses:
                return snap
            if deadline is not None and time.monotonic() > deadline:
                return snap
            got = await self.events(run_id, cursor, block_ms=200 if statuses else BLOCK_MS)
            if got:
                cursor = got[-1][0]

    async def approvals(self, run_id: str) -> list[dict[str, Any]]:
        """The run's approvals (every status), oldest first."""
        return await asyncio.to_thread(self.d.approvals.for_run, run_id)

    async def cancel(self, run_id: str) -> None:
        """Ask the run to stop at its next step boundary (nothing if it ended)."""
        await asyncio.to_thread(lambda: self.d.handle(run_id).cancel())

    async def decide(self, run_id: str, approval_id: str, decision: str, *, message: str | None = None,
                     by: str | None = None) -> dict[str, Any]:
        """Decide a pending approval for the arguments it was requested with."""
        return await asyncio.to_thread(lambda: self.d.handle(run_id).decide(approval_id, decision, message=message,
                                                                             by=by))
