"""The gateway's shared stream readers (``dispatcher/http/hub.py``) behind the SSE generator,
on fakeredis: many watchers of a stream share one read, each still gets every entry once and
in order, resumes exactly after its cursor, and a slow or late watcher loses nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import fakeredis
import pytest
import redis

from reactq.dispatcher.http import hub as hub_mod
from reactq.dispatcher.http.hub import StreamHub
from reactq.dispatcher.http.sse import GONE, event_stream

KEY = "reactq:run:{r1}:events"
OTHER = "reactq:run:{r2}:events"


class CountingRedis(fakeredis.aioredis.FakeRedis):
    """Counts the ``XREAD`` calls (one per watcher per read on the old gateway)."""

    xreads = 0

    async def xread(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        type(self).xreads += 1
        return await super().xread(*args, **kwargs)


@pytest.fixture
def server() -> fakeredis.FakeServer:
    return fakeredis.FakeServer()


def add(r: Any, key: str, seq: int, channel: str = "step") -> Awaitable[Any]:
    return r.xadd(key, {"event": channel, "data": json.dumps({"seq": seq})})


def running() -> Callable[[], Awaitable[bool | None]]:
    async def ended() -> bool | None:
        return False
    return ended


async def collect(stream: AsyncIterator[str]) -> list[str]:
    """The frames and comments of one response, one string per frame."""
    text = "".join([chunk async for chunk in stream])
    return [part + "\n\n" for part in text.split("\n\n") if part]


def seqs(frames: list[str]) -> list[int]:
    return [json.loads(f.split("data: ", 1)[1])["seq"] for f in frames if "data: " in f]


async def settle(hub: StreamHub, key: str, watchers: int) -> None:
    """Until ``watchers`` watch ``key`` and the reader reads it."""
    for _ in range(500):
        g = hub._groups.get(hub._gid(key))
        if g is not None and len(g.watchers.get(key, ())) == watchers and key in g.cursors:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the watchers never subscribed")


def test_many_watchers_share_one_read_and_each_gets_every_event_once_in_order(server) -> None:
    async def main() -> None:
        CountingRedis.xreads = 0
        r = CountingRedis(server=server)
        hub = StreamHub(r, cluster=False, block_ms=30_000)
        await add(r, KEY, 1)
        tasks = [asyncio.create_task(collect(event_stream(hub, r, KEY, None, running(), 30)))
                 for _ in range(50)]
        await settle(hub, KEY, 50)
        for seq in range(2, 6):
            await add(r, KEY, seq)
        await add(r, KEY, 6, "done")
        results = await asyncio.wait_for(asyncio.gather(*tasks), 20)
        for frames in results:
            assert seqs(frames) == [1, 2, 3, 4, 5, 6] and "event: done" in frames[-1]
        assert CountingRedis.xreads < 50, CountingRedis.xreads  # one reader, not one read per watcher
        await hub.close()

    asyncio.run(main())


def test_a_cursor_resumes_exactly_after_it_and_a_bogus_one_starves_no_one(server) -> None:
    async def main() -> None:
        r = fakeredis.aioredis.FakeRedis(server=server)
        hub = StreamHub(r, cluster=False, block_ms=30_000)
        ids = [(await add(r, KEY, seq)).decode() for seq in (1, 2, 3)]
        future = "99999999999999-0"  # a Last-Event-ID from elsewhere, past every entry
        late = asyncio.create_task(collect(event_stream(hub, r, KEY, future, running(), 30)))
        await settle(hub, KEY, 1)
        resumed = asyncio.create_task(collect(event_stream(hub, r, KEY, ids[1], running(), 30)))
        fresh = asyncio.create_task(collect(event_stream(hub, r, KEY, None, running(), 30)))
        await settle(hub, KEY, 3)
        await add(r, KEY, 4)
        await add(r, KEY, 5, "done")
        assert seqs(await asyncio.wait_for(resumed, 20)) == [3, 4, 5]
        assert seqs(await asyncio.wait_for(fresh, 20)) == [1, 2, 3, 4, 5]
        late.cancel()
        await hub.close()

    asyncio.run(main())


def test_a_watcher_too_slow_for_its_queue_rereads_from_redis_and_loses_nothing(server, monkeypatch) -> None:
    monkeypatch.setattr(hub_mod, "QUEUE_LIMIT", 3)

    async def main() -> None:
        r = fakeredis.aioredis.FakeRedis(server=server)
        hub = StreamHub(r, cluster=False, block_ms=30_000)
        stream = event_stream(hub, r, KEY, None, running(), 30)
        await add(r, KEY, 1)
        got = [await anext(stream)]  # subscribed, then does not read for a while
        for seq in range(2, 20):
            await add(r, KEY, seq)
            await asyncio.sleep(0.01)  # the reader hands each to the queue, which overflows
        await add(r, KEY, 20, "done")
        got += [chunk async for chunk in stream]
        assert seqs(await collect(_iter(got))) == list(range(1, 21))
        await hub.close()

    asyncio.run(main())


async def _iter(chunks: list[str]) -> AsyncIterator[str]:
    for c in chunks:
        yield c


def test_a_stream_added_while_a_read_blocks_is_read_at_once(server) -> None:
    async def main() -> None:
        r = fakeredis.aioredis.FakeRedis(server=server)
        hub = StreamHub(r, cluster=False, block_ms=120_000, readers=1)  # one group: both keys
        first = asyncio.create_task(collect(event_stream(hub, r, KEY, None, running(), 120)))
        await settle(hub, KEY, 1)
        await asyncio.sleep(0.1)  # its XREAD (2 minutes) is in flight
        second = asyncio.create_task(collect(event_stream(hub, r, OTHER, None, running(), 120)))
        await settle(hub, OTHER, 1)
        await add(r, OTHER, 1, "done")
        # Without the wake-up the reader would see OTHER only after its 2-minute block.
        assert seqs(await asyncio.wait_for(second, 20)) == [1]
        first.cancel()
        await hub.close()

    asyncio.run(main())


def test_quiet_streams_get_keepalives_and_one_status_check_answers_all_watchers(server) -> None:
    checks = 0
    WATCHERS = 40  # noqa: N806

    async def main() -> list[list[str]]:
        loop = asyncio.get_running_loop()
        expires = loop.time() + 1.0

        async def expired_after_a_second() -> bool | None:
            nonlocal checks
            checks += 1
            return False if loop.time() < expires else None

        r = fakeredis.aioredis.FakeRedis(server=server)
        hub = StreamHub(r, cluster=False, block_ms=1_000)
        await add(r, KEY, 1)
        out = await asyncio.wait_for(asyncio.gather(
            *(collect(event_stream(hub, r, KEY, None, expired_after_a_second, 0.3)) for _ in range(WATCHERS))), 30)
        await hub.close()
        return out

    for frames in asyncio.run(main()):
        assert seqs(frames) == [1] and ": keepalive\n\n" in frames  # then the run expired: the stream ends
    # One check per watcher would be at least 2 * WATCHERS (its open and its first quiet spell).
    assert checks < WATCHERS, checks


def test_a_reader_that_loses_redis_ends_every_stream_cleanly(server) -> None:
    class Broken(fakeredis.aioredis.FakeRedis):
        async def xread(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            raise redis.ConnectionError("gone")

    async def main() -> list[list[str]]:
        r = Broken(server=server)
        hub = StreamHub(r, cluster=False, block_ms=30_000)
        await add(r, KEY, 1)
        out = await asyncio.wait_for(asyncio.gather(
            *(collect(event_stream(hub, r, KEY, None, running(), 30)) for _ in range(3))), 20)
        await hub.close()
        return out

    for frames in asyncio.run(main()):
        assert seqs(frames) == [1] and "".join(frames).endswith(GONE)


def test_cluster_mode_groups_streams_by_hash_slot(server) -> None:
    async def main() -> None:
        hub = StreamHub(fakeredis.aioredis.FakeRedis(server=server), cluster=True, block_ms=1000)
        assert hub._gid(KEY) != hub._gid(OTHER)  # two runs: two slots, two reads
        assert hub._gid(KEY) == hub._gid("reactq:run:{r1}")  # a run's keys share its slot

    asyncio.run(main())
