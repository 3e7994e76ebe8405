"""One shared reader of event streams per gateway process, fanning entries out to the watchers.

A watcher per blocking ``XREAD`` cost a thousand watchers a thousand Redis connections, and
each event of a run watched a hundred times was read, parsed and framed a hundred times on
the event loop: the loop fell behind and ``/healthz`` waited. Here each
stream is read once, each entry framed once, and the frame handed to every watcher's queue.

* **Readers.** A reader is one task with one ``XREAD BLOCK`` over all the keys of its group.
  Standalone Redis: keys are spread over ``READERS`` groups (so one reply never carries every
  stream). Redis Cluster: one ``XREAD`` cannot span hash slots, so a group is a slot — every
  key of a run is in the run's slot, hence one reader per watched run, shared by its
  watchers. A key added to a group whose read is in flight cancels that read (redis-py drops
  the connection, the next read opens one) so the next ``XREAD`` includes it at once.
* **Exactly once, in order.** A watcher subscribes *first*, then reads its backlog with
  ``XRANGE``, then takes entries from its queue, skipping ids it already sent: whatever the
  reader read before the subscription is in the backlog, whatever after is in the queue.
* **Slow clients.** A queue holds at most ``QUEUE_LIMIT`` entries; past that it is dropped
  and the watcher marked ``behind``: it re-reads from Redis after its last sent id (the same
  rule as the first backlog), so memory stays bounded and nothing is lost.
* **Pacing.** Watchers with something new are woken ``WAKE_BATCH`` per turn of the loop
  (``_Waker``), and those that waited for one shared status check go on through the loop's
  ``Pacer``: a thousand tasks resumed in one turn would hold the loop for the whole turn.
* **Failures.** A reader whose ``XREAD`` fails hands the error to every watcher of its group
  (the SSE generator ends the response cleanly; clients resume with ``Last-Event-ID``).
"""

from __future__ import annotations

import asyncio
import zlib
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.crc import key_slot

from reactq.dispatcher.http.pacing import loop_pacer
from reactq.shared.events import Event

#: Reader groups on a standalone Redis.
READERS = 4
#: Entries one ``XREAD`` takes per stream (the rest comes with the next read, in order).
COUNT = 500
#: Entries a watcher's queue holds before it is dropped and the watcher re-reads from Redis.
QUEUE_LIMIT = 10_000
#: Watchers woken per turn of the event loop (``_Waker``).
WAKE_BATCH = 32
#: Short reads (backlogs, status checks) of the SSE path in flight at once: a burst of opens
#: waits its turn instead of exhausting a connection pool (a Redis Cluster client raises).
READS = 32
#: How long one status check answers every watcher of a stream that went quiet.
ENDED_TTL = 1.0
#: Status checks kept before the stale ones are dropped.
ENDED_KEEP = 1024

StreamId = tuple[int, int]
Ended = Callable[[], Awaitable[bool | None]]


def parse_id(raw: str) -> StreamId:
    """``"<ms>-<seq>"`` (or ``"<ms>"``, seq 0, as Redis reads it) → a comparable pair."""
    ms, _, seq = raw.partition("-")
    return int(ms), int(seq or 0)


@dataclass(frozen=True, slots=True)
class Entry:
    """One stream entry, framed once for every watcher."""

    sid: StreamId
    id: str
    frame: str
    done: bool


def to_entry(raw_id: bytes | str, fields: dict[Any, Any]) -> Entry:
    sid = raw_id.decode() if isinstance(raw_id, bytes) else raw_id
    event = Event.from_fields(fields)
    return Entry(parse_id(sid), sid, event.sse(sid), event.channel == "done")


class Watcher:
    """One SSE client's queue of the entries the reader read since it subscribed."""

    __slots__ = ("key", "entries", "behind", "error", "queued", "_waiter")

    def __init__(self, key: str) -> None:
        self.key = key
        self.entries: deque[Entry] = deque()
        self.behind = False
        self.error: BaseException | None = None
        self.queued = False  # in the waker's queue
        self._waiter: asyncio.Future[None] | None = None

    def push(self, entry: Entry) -> None:
        if self.behind:
            return
        if len(self.entries) >= QUEUE_LIMIT:
            self.entries.clear()  # too slow a client: it re-reads from Redis instead
            self.behind = True
        else:
            self.entries.append(entry)

    @property
    def waiting(self) -> bool:
        return self._waiter is not None and not self._waiter.done()

    def wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self, timeout: float) -> bool:
        """True once there is something to take (entries, ``behind``, an error); False after
        ``timeout`` seconds of quiet."""
        if self.entries or self.behind or self.error is not None:
            return True
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                await self._waiter
            return True
        except TimeoutError:
            # Entries pushed while it waited its turn in the waker count: a quiet spell that
            # ends with something to send is not quiet (no status check, no re-read).
            return bool(self.entries or self.behind or self.error is not None)
        finally:
            self._waiter = None

    def take(self) -> list[Entry]:
        out = list(self.entries)
        self.entries.clear()
        return out


class _Waker:
    """Wakes waiting watchers, at most ``WAKE_BATCH`` per turn of the event loop.

    Why: one event of ten runs watched a hundred times each wakes a thousand tasks. Woken in
    one turn, they would run back to back before the loop looks at its sockets again, and a
    ``/healthz`` request (read in the next turn) would wait for all of them. In batches, the
    loop polls its sockets between every batch; the frames are sent just as fast in total.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: deque[Watcher] = deque()
        self.scheduled = False

    def add(self, w: Watcher) -> None:
        if w.queued or not w.waiting:
            return  # a watcher busy sending takes its entries when it next waits
        w.queued = True
        self.queue.append(w)
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self._run)

    def _run(self) -> None:
        for _ in range(min(WAKE_BATCH, len(self.queue))):
            w = self.queue.popleft()
            w.queued = False
            w.wake()
        if self.queue:
            self.loop.call_soon(self._run)  # the next batch after the loop polled its sockets
        else:
            self.scheduled = False


@dataclass
class _Group:
    """The keys one reader reads (key → last id read) and their watchers."""

    cursors: dict[str, str] = field(default_factory=dict)
    watchers: dict[str, set[Watcher]] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    wake: asyncio.Future[None] | None = None


class StreamHub:
    """The readers of one event loop (``Gateway.hub`` makes one per loop)."""

    def __init__(self, r: aioredis.Redis, *, cluster: bool, block_ms: int, readers: int = READERS) -> None:
        self.redis = r
        self.cluster = cluster
        self.block_ms = block_ms
        self.readers = readers
        self.loop = asyncio.get_running_loop()
        self._groups: dict[int, _Group] = {}
        self._waker = _Waker(self.loop)
        self.reads = asyncio.Semaphore(READS)
        self._ended: dict[str, tuple[float, asyncio.Future[bool | None]]] = {}

    def _gid(self, key: str) -> int:
        raw = key.encode()
        return key_slot(raw) if self.cluster else zlib.crc32(raw) % self.readers

    def subscribe(self, key: str) -> Watcher:
        """A watcher of ``key``: gets every entry the reader reads from now on."""
        g = self._groups.setdefault(self._gid(key), _Group())
        w = Watcher(key)
        g.watchers.setdefault(key, set()).add(w)
        return w

    def reading(self, key: str) -> bool:
        g = self._groups.get(self._gid(key))
        return g is not None and key in g.cursors

    def start(self, w: Watcher, after: str) -> None:
        """Read ``w.key`` after ``after`` (the end of ``w``'s backlog), unless it is read already."""
        g = self._groups.get(self._gid(w.key))
        if g is None or w not in g.watchers.get(w.key, ()) or w.key in g.cursors:
            return
        g.cursors[w.key] = after
        if g.task is None or g.task.done():
            gid = self._gid(w.key)
            g.task = self.loop.create_task(self._read(gid, g), name=f"reactq-sse-reader-{gid}")
        else:
            self._wake(g)  # its XREAD in flight does not have this key: read again with it

    def unsubscribe(self, w: Watcher) -> None:
        gid = self._gid(w.key)
        g = self._groups.get(gid)
        if g is None:
            return
        subs = g.watchers.get(w.key)
        if subs is not None:
            subs.discard(w)
            if not subs:
                del g.watchers[w.key]
                g.cursors.pop(w.key, None)
                self._ended.pop(w.key, None)
        if not g.cursors:
            self._wake(g)  # nothing left to read: the reader ends
        if not g.watchers and (g.task is None or g.task.done()):
            del self._groups[gid]

    async def ended(self, key: str, check: Ended) -> bool | None:
        """``check()`` once for the watchers of ``key`` that open or go quiet within ``ENDED_TTL``
        of each other (a thousand watchers opening at once cost a few reads, not a thousand).
        A stale answer is harmless: ``False`` only delays a check by a keep-alive (the ``done``
        comes through the reader anyway) and ``True`` does not change back."""
        now = self.loop.time()
        hit = self._ended.get(key)
        if hit is None or now - hit[0] > ENDED_TTL or _failed(hit[1]):
            if len(self._ended) >= ENDED_KEEP:  # checks of streams no one went on to watch
                self._ended = {k: v for k, v in self._ended.items() if now - v[0] <= ENDED_TTL}
            hit = (now, asyncio.ensure_future(self._check(check)))
            self._ended[key] = hit
        if not hit[1].done():
            # shield: a watcher that goes away must not cancel the check the others wait for
            await asyncio.shield(hit[1])
            # All that waited for it wake in one turn: go on a few per turn (``pacing``).
            await loop_pacer().admit()
        state = hit[1].result()
        if state is None and self._ended.get(key) is hit:
            del self._ended[key]  # "no such stream" is not kept: it may be created any time
        return state

    async def _check(self, check: Ended) -> bool | None:
        async with self.reads:
            return await check()

    async def close(self) -> None:
        tasks = [g.task for g in self._groups.values() if g.task is not None and not g.task.done()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._groups.clear()

    @staticmethod
    def _wake(g: _Group) -> None:
        if g.wake is not None and not g.wake.done():
            g.wake.set_result(None)

    async def _read(self, gid: int, g: _Group) -> None:
        try:
            await self._read_loop(g)
        finally:
            if not g.watchers and self._groups.get(gid) is g:
                del self._groups[gid]

    async def _read_loop(self, g: _Group) -> None:
        while g.cursors:
            g.wake = self.loop.create_future()
            read = self.loop.create_task(self._xread(dict(g.cursors)))
            try:
                await asyncio.wait((read, g.wake), return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not read.done():
                    # Woken (a new key, or none left) or closing: redis-py drops the connection
                    # of a cancelled read; nothing it read is lost (the cursors did not move).
                    read.cancel()
                    read.add_done_callback(_retrieve)
            if not read.done():
                continue
            if (exc := read.exception()) is not None:
                self._fail(g, exc)
                return
            self._deliver(g, _pairs(read.result()))

    async def _xread(self, streams: dict[str, str]) -> Any:
        return await self.redis.xread(dict(streams), block=self.block_ms, count=COUNT)  # type: ignore[arg-type]

    def _deliver(self, g: _Group, replies: Iterable[tuple[Any, list[Any]]]) -> None:
        for raw_key, raw_entries in replies:
            key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
            if key not in g.cursors or not raw_entries:
                continue  # no one watches it any more
            entries = [to_entry(i, f) for i, f in raw_entries]
            g.cursors[key] = entries[-1].id
            for w in g.watchers.get(key, ()):
                for e in entries:
                    w.push(e)
                self._waker.add(w)

    def _fail(self, g: _Group, exc: BaseException) -> None:
        g.cursors.clear()
        for subs in g.watchers.values():
            for w in subs:
                w.error = exc
                self._waker.add(w)


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Retrieve a dropped read's outcome (so asyncio does not log it as never retrieved)."""
    if not task.cancelled():
        task.exception()


def _failed(fut: asyncio.Future[Any]) -> bool:
    return fut.done() and (fut.cancelled() or fut.exception() is not None)


def _pairs(res: Any) -> Iterable[tuple[Any, list[Any]]]:
    """``XREAD``'s reply as (key, entries): a list of pairs (RESP2) or a mapping (RESP3)."""
    if not res:
        return ()
    if isinstance(res, dict):
        return res.items()
    return ((k, v) for k, v in res)
