"""The one SSE generator of the gateway, used by run and DAG event streams alike.

Frames: ``id:`` = Redis stream id, ``event:`` = channel, ``data:`` = JSON. The stream starts
after a cursor (``Last-Event-ID`` or ``?after=``), sends a ``: keepalive`` comment after each
quiet spell and ends after ``done``. When Redis goes away mid-stream the response *ends*
(every frame sent is whole, with its id) instead of being cut, so a client that reconnects
with ``Last-Event-ID`` resumes exactly after the last event it got.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio as aioredis
from fastapi.responses import StreamingResponse

from reactq.dispatcher.http.errors import field_error, not_found
from reactq.shared.errors import RunNotFound
from reactq.shared.events import Event
from reactq.shared.inputs import stream_id_problem

if TYPE_CHECKING:
    from reactq.dispatcher.http.gateway import Gateway

log = logging.getLogger("reactq.http")

#: ``None``: the run / DAG is gone (expired); True: it ended; False: still going.
Ended = Callable[[], Awaitable[bool | None]]

#: Sent when Redis went away: browsers' EventSource waits this long (ms) before reconnecting.
RETRY_MS = 1000
GONE = f"retry: {RETRY_MS}\n: redis unavailable; reconnect with Last-Event-ID to resume\n\n"


def check_cursor(cursor: str | None) -> str | None:
    """None when ``cursor`` is a valid stream id (or absent), else why not."""
    return stream_id_problem(cursor)


async def _backlog(r: aioredis.Redis, key: str, cursor: str | None) -> AsyncIterator[str]:
    entries = await r.xrange(key, min=f"({cursor}" if cursor else "-")
    for raw_id, fields in entries:
        yield Event.from_fields(fields).sse(raw_id.decode())


async def _frames(r: aioredis.Redis, key: str, cursor: str | None, ended: Ended,
                  keepalive: float) -> AsyncIterator[str]:
    if await ended():  # ended: what is left, without blocking for a keep-alive first
        async for frame in _backlog(r, key, cursor):
            yield frame
        return
    block_ms = max(1, int(keepalive * 1000))
    while True:
        res = await r.xread({key: cursor or "0-0"}, block=block_ms, count=500)
        entries = res[0][1] if res else []
        for raw_id, fields in entries:
            cursor = raw_id.decode()
            event = Event.from_fields(fields)
            yield event.sse(cursor)
            if event.channel == "done":
                return
        if not entries:
            state = await ended()
            if state is None:
                return  # expired
            if state:  # its done event raced the status: send what is left
                async for frame in _backlog(r, key, cursor):
                    yield frame
                return
            yield ": keepalive\n\n"


async def event_stream(r: aioredis.Redis, key: str, cursor: str | None, ended: Ended,
                       keepalive: float) -> AsyncIterator[str]:
    """SSE frames of stream ``key`` after ``cursor``; ends cleanly if Redis goes away."""
    try:
        async for frame in _frames(r, key, cursor, ended, keepalive):
            yield frame
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        log.warning("SSE stream %s: Redis went away (%s); the client resumes with Last-Event-ID",
                    key, type(exc).__name__)
        yield GONE


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def events_response(gw: Gateway, hash_key: str, events_key: str, terminal: Collection[str],
                          missing: RunNotFound, after: str | None, last_event_id: str | None) -> Any:
    """``GET /v1/runs/{id}/events`` and ``GET /v1/dags/{id}/events``: 422 for a bad cursor,
    404 (``missing``) when the hash ``hash_key`` is gone, else the SSE stream of
    ``events_key``, which ends once the hash's status is in ``terminal``."""
    cursor = last_event_id or after  # the header is the newer position on a reconnect
    if (why := check_cursor(cursor)) is not None:
        return field_error("last-event-id" if last_event_id else "after", why,
                           where="header" if last_event_id else "query")
    if await gw.status_of(hash_key) is None:
        return not_found(missing)

    async def ended() -> bool | None:
        status = await gw.status_of(hash_key)
        return None if status is None else status in terminal

    return StreamingResponse(event_stream(gw.streams, events_key, cursor, ended, gw.keepalive),
                             media_type="text/event-stream", headers=SSE_HEADERS)
