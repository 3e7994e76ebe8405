"""The one SSE generator of the gateway, used by run and DAG event streams alike.

Frames: ``id:`` = Redis stream id, ``event:`` = channel, ``data:`` = JSON. The stream starts
after a cursor (``Last-Event-ID`` or ``?after=``), sends a ``: keepalive`` comment after each
quiet spell and ends after ``done``. When Redis goes away mid-stream the response *ends*
(every frame sent is whole, with its id) instead of being cut, so a client that reconnects
with ``Last-Event-ID`` resumes exactly after the last event it got.

Live events come from the gateway's shared stream readers (``hub``): a watcher joins its
reader first, then reads its backlog after the cursor, then takes what the reader hands it,
skipping ids it already sent.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Collection
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio as aioredis
from fastapi.responses import StreamingResponse

from reactq.dispatcher.http.errors import field_error, not_found
from reactq.dispatcher.http.hub import Ended, Entry, StreamHub, parse_id, to_entry
from reactq.shared.errors import RunNotFound
from reactq.shared.inputs import stream_id_problem
from reactq.shared.stores.records import Record

if TYPE_CHECKING:
    from reactq.dispatcher.http.gateway import Gateway

log = logging.getLogger("reactq.http")

#: ``Ended``: ``None``: the run / DAG is gone (expired); True: it ended; False: still going.
__all__ = ["Ended", "SSE_HEADERS", "SSE_RESPONSE", "check_cursor", "event_stream", "events_response"]

#: The OpenAPI description of an SSE route's 200: frames of ``Event`` (``reactq.shared.api.events``;
#: the app adds its schemas to the components).
SSE_RESPONSE: dict[int | str, dict[str, Any]] = {200: {
    "description": "Server-sent events: `id:` (the stream id, for `Last-Event-ID`), `event:` (the channel) "
                   "and `data:` (the JSON payload) of each `Event`; ends after `done`.",
    "content": {"text/event-stream": {"schema": {"$ref": "#/components/schemas/Event"}}}}}

#: Sent when Redis went away: browsers' EventSource waits this long (ms) before reconnecting.
RETRY_MS = 1000
GONE = f"retry: {RETRY_MS}\n: redis unavailable; reconnect with Last-Event-ID to resume\n\n"


def check_cursor(cursor: str | None) -> str | None:
    """None when ``cursor`` is a valid stream id (or absent), else why not."""
    return stream_id_problem(cursor)


#: Entries one backlog ``XRANGE`` takes (a long stream is read page by page).
PAGE = 500
KEEPALIVE = ": keepalive\n\n"


async def _backlog(hub: StreamHub, r: aioredis.Redis, key: str,
                   cursor: str | None) -> tuple[list[Entry], str | None]:
    """Every entry after ``cursor`` (paged) and the id of the last one (``cursor`` if none)."""
    out: list[Entry] = []
    while True:
        async with hub.reads:  # a thousand watchers opening at once: a bounded number of reads
            raw: list[Any] = await r.xrange(key, min=f"({cursor}" if cursor else "-", count=PAGE) or []
        out.extend(to_entry(i, f) for i, f in raw)
        if out:
            cursor = out[-1].id
        if len(raw) < PAGE:
            return out, cursor


async def _start_at(hub: StreamHub, r: aioredis.Redis, key: str, cursor: str | None) -> str:
    """Where the shared reader starts a stream with nothing after ``cursor``: ``cursor``, or
    the stream's last id when ``cursor`` is past it — a ``Last-Event-ID`` of another stream
    must not make the reader skip what the other watchers of this one wait for."""
    async with hub.reads:
        last = await r.xrevrange(key, count=1)
    if not last or cursor is None:
        return "0-0"
    top = last[0][0].decode() if isinstance(last[0][0], bytes) else str(last[0][0])
    return min(cursor, top, key=parse_id)


def _after(entries: list[Entry], cursor: str | None) -> tuple[str, str | None, bool]:
    """The frames of ``entries`` after ``cursor`` up to a ``done`` as one chunk, the new
    cursor, and whether the ``done`` was among them."""
    last = parse_id(cursor) if cursor else (-1, -1)
    frames: list[str] = []
    for e in entries:
        if e.sid <= last:
            continue  # already sent (from the backlog, or a queue that overlapped it)
        frames.append(e.frame)
        cursor, last = e.id, e.sid
        if e.done:
            return "".join(frames), cursor, True
    return "".join(frames), cursor, False


async def _frames(hub: StreamHub, r: aioredis.Redis, key: str, cursor: str | None, ended: Ended,
                  keepalive: float) -> AsyncIterator[str]:
    if await hub.ended(key, ended):  # ended: what is left, without waiting for a keep-alive first
        chunk, _, _ = _after((await _backlog(hub, r, key, cursor))[0], cursor)
        if chunk:
            yield chunk
        return
    w = hub.subscribe(key)  # before the backlog: nothing falls between the two
    try:
        entries, _ = await _backlog(hub, r, key, cursor)
        if not hub.reading(key):
            hub.start(w, entries[-1].id if entries else await _start_at(hub, r, key, cursor))
        while True:
            chunk, cursor, done = _after(entries, cursor)
            if chunk:
                yield chunk
            if done:
                return
            if not await w.wait(keepalive):
                state = await hub.ended(key, ended)
                if state is None:
                    return  # expired
                if state:  # its done event raced the status: send what is left
                    entries = (await _backlog(hub, r, key, cursor))[0]
                    chunk, _, _ = _after(entries, cursor)
                    if chunk:
                        yield chunk
                    return
                entries = []
                yield KEEPALIVE
                continue
            if w.error is not None:
                raise w.error
            if w.behind:  # the queue was dropped (a slow client): re-read what was missed
                w.behind = False
                entries = (await _backlog(hub, r, key, cursor))[0] + w.take()
            else:
                entries = w.take()
    finally:
        hub.unsubscribe(w)


async def event_stream(hub: StreamHub, r: aioredis.Redis, key: str, cursor: str | None, ended: Ended,
                       keepalive: float) -> AsyncIterator[str]:
    """SSE frames of stream ``key`` after ``cursor``; ends cleanly if Redis goes away.

    Live entries come from the gateway's shared reader (``hub``); ``r`` reads the backlog."""
    try:
        async for frame in _frames(hub, r, key, cursor, ended, keepalive):
            yield frame
    except (redis.ConnectionError, redis.TimeoutError, redis.exceptions.RedisClusterException, OSError) as exc:
        log.warning("SSE stream %s: Redis went away (%s); the client resumes with Last-Event-ID",
                    key, type(exc).__name__)
        yield GONE


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def events_response(gw: Gateway, record: Record, terminal: Collection[str],
                          missing: RunNotFound, after: str | None, last_event_id: str | None) -> Any:
    """``GET /v1/runs/{id}/events`` and ``GET /v1/dags/{id}/events``: 422 for a bad cursor,
    404 (``missing``) when ``record`` is gone, else the SSE stream of its events, which ends
    once its status is in ``terminal``."""
    cursor = last_event_id or after  # the header is the newer position on a reconnect
    if (why := check_cursor(cursor)) is not None:
        return field_error("last-event-id" if last_event_id else "after", why,
                           where="header" if last_event_id else "query")

    async def ended() -> bool | None:
        status = await record.status(gw.aredis)
        return None if status is None else status in terminal

    if await gw.hub.ended(record.events_key, ended) is None:  # shared with the stream's own first check
        return not_found(missing)
    return StreamingResponse(event_stream(gw.hub, gw.aredis, record.events_key, cursor, ended, gw.keepalive),
                             media_type="text/event-stream", headers=SSE_HEADERS)
