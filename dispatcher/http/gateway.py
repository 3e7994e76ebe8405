"""What the routes share (``Gateway``) and the one FastAPI dependency that hands it out.

Two async Redis clients: ``aredis`` for short commands (and SSE backlogs) and ``streams`` for
the blocking ``XREAD`` of the shared stream readers (``hub``: a few reads for every watcher of
the process, not one per watcher). The latter has no socket timeout shorter than a keep-alive
spell (a quiet stream must not be cut). Batch drivers run in their own thread pool so they
never starve the default executor.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from typing import Annotated, Any

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from fastapi import Depends, Header, Path, Query, Request

from reactq.dispatcher.batch.store import BatchStore, drive_stored_batch, holder_name
from reactq.dispatcher.client import Dispatcher
from reactq.dispatcher.dag import DagDispatcher
from reactq.dispatcher.http.hub import StreamHub
from reactq.shared.api.runs import InterruptIn
from reactq.shared.inputs import ID_PATTERN
from reactq.shared.requests import THREAD_ID_PATTERN
from reactq.shared.redisconn import _state_url, async_client, connection_options
from reactq.shared.settings import Settings
from reactq.shared.stores.evals import EvalStore

log = logging.getLogger("reactq.http")

#: Redis connections for short commands (status reads, readiness pings).
COMMAND_POOL = 64
#: After a Redis restart every pooled connection is dead: retry once on a fresh one instead
#: of answering 503 to the first request that meets each of them.
_RECONNECT: dict[str, Any] = {
    "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), 3),
    "retry_on_error": [redis.ConnectionError, redis.TimeoutError, ConnectionError],
    "health_check_interval": 10,
}


class Gateway:
    """Settings, the sync dispatchers (runs, DAGs), the async Redis clients, batch threads."""

    def __init__(self, settings: Settings, keepalive: float = 15.0, *, dispatcher: Dispatcher | None = None,
                 dags: DagDispatcher | None = None, aredis: aioredis.Redis | None = None,
                 max_watchers: int = 2000, batch_threads: int = 32) -> None:
        self.settings = settings
        self.keepalive = keepalive
        self.max_watchers = max_watchers
        self._dispatcher = dispatcher
        self._dags = dags
        self._aredis = aredis
        self._aredis_loop: asyncio.AbstractEventLoop | None = None  # None: given, or not yet made
        self._streams: aioredis.Redis | None = aredis
        self._hub: StreamHub | None = None
        self.stop = threading.Event()
        self.tasks: set[asyncio.Future[Any]] = set()
        self.holder = holder_name()
        self.batch_pool = ThreadPoolExecutor(batch_threads, thread_name_prefix="reactq-batch")

    @cached_property
    def dispatcher(self) -> Dispatcher:
        return self._dispatcher or (self._dags.runs if self._dags is not None else Dispatcher(self.settings))

    @cached_property
    def dags(self) -> DagDispatcher:
        return self._dags or DagDispatcher(self.settings, runs=self.dispatcher)

    @property
    def keys(self) -> Any:
        return self.dispatcher.keys

    @property
    def aredis(self) -> aioredis.Redis:
        """The short-command client of the running event loop (a test client may run each
        request on a loop of its own: a client's connections belong to one loop)."""
        loop = _running_loop()
        if self._aredis is None or (self._aredis_loop is not None and loop is not None
                                    and self._aredis_loop is not loop):
            # Blocking pool: a burst of watchers waits for a connection instead of a 503.
            self._aredis = self._client(max_connections=COMMAND_POOL, timeout=10, socket_timeout=5)
            self._aredis_loop = loop
        return self._aredis

    @property
    def streams(self) -> aioredis.Redis:
        """For blocking reads: the socket timeout outlasts the ``XREAD`` block (a keep-alive spell)."""
        if self._streams is None:
            self._streams = self._client(max_connections=self.max_watchers, timeout=5,
                                         socket_timeout=self.keepalive + 10)
        return self._streams

    @property
    def hub(self) -> StreamHub:
        """The shared stream readers of the running event loop (a test client may run each
        request on a loop of its own; a reader lives on one loop)."""
        loop = asyncio.get_running_loop()
        if self._hub is None or self._hub.loop is not loop:
            self._hub = StreamHub(self.streams, cluster=self.settings.redis_cluster,
                                  block_ms=max(1, int(self.keepalive * 1000)))
        return self._hub

    def _client(self, *, max_connections: int, timeout: float, socket_timeout: float) -> aioredis.Redis:
        """A client over a blocking pool (a burst of watchers waits for a connection instead
        of a 503), with the TLS/ACL options of the settings; a Redis Cluster client in
        cluster mode (its pools are per node)."""
        if self.settings.redis_cluster:
            # Per node; the cluster client raises past it (no waiting), and a blocked XREAD of
            # each watched run (one slot each) holds one: at least its default of 100.
            return async_client(self.settings, socket_timeout=socket_timeout, socket_connect_timeout=2,
                                max_connections=max(max_connections, 100))
        url = _state_url(self.settings)
        pool = aioredis.BlockingConnectionPool.from_url(
            url, max_connections=max_connections, timeout=timeout, socket_timeout=socket_timeout,
            socket_connect_timeout=2, **_RECONNECT, **connection_options(self.settings, url))
        return aioredis.Redis(connection_pool=pool)

    @cached_property
    def batches(self) -> BatchStore:
        return BatchStore(self.dispatcher.redis, self.keys, self.settings.run_ttl_seconds)

    @cached_property
    def evals(self) -> EvalStore:
        return EvalStore(self.dispatcher.redis, self.keys, self.settings.eval_ttl_s)

    def start_batch(self, batch_id: str) -> None:
        """Drive a batch in the batch pool; the task set keeps a reference until it ends."""
        self._drive(drive_stored_batch, self.dispatcher, self.batches, batch_id, self.holder, self.stop)

    def start_eval(self, eval_id: str) -> None:
        """Drive an eval's batch in the batch pool, scoring each line as it ends."""
        from reactq.dispatcher.evals.drive import drive_eval

        self._drive(drive_eval, self.dispatcher, self.evals, self.batches, eval_id, self.holder, self.stop)

    def _drive(self, fn: Any, *args: Any) -> None:
        fut = asyncio.get_running_loop().run_in_executor(self.batch_pool, fn, *args)
        self.tasks.add(fut)
        fut.add_done_callback(self.tasks.discard)

    async def resume_batches(self) -> None:
        """Drive the batches left running by a gateway that went away (lease expired)."""
        loop = asyncio.get_running_loop()
        for batch_id, eval_id in await loop.run_in_executor(self.batch_pool, self._claim_unfinished):
            log.info("resuming batch %s", batch_id)
            if eval_id:
                self.start_eval(eval_id)
            else:
                self.start_batch(batch_id)

    def _claim_unfinished(self) -> list[tuple[str, str | None]]:
        """(batch id, the eval it runs or None) of the unfinished batches this gateway took."""
        store = self.batches
        taken = [b for b in store.unfinished() if store.claim(b, self.holder)]
        return [(b, store.eval_of(b)) for b in taken]

    async def close(self) -> None:
        self.stop.set()
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=5)
        self.batch_pool.shutdown(wait=False)
        if self._hub is not None:
            await self._hub.close()
        for client in {id(c): c for c in (self._aredis, self._streams) if c is not None}.values():
            await client.aclose()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def get_gateway(request: Request) -> Gateway:
    """The one dependency every route takes. ``async``: a plain ``def`` dependency would
    cost every request (a thousand SSE connects) a trip through the thread pool."""
    gw: Gateway = request.app.state.gateway
    return gw


GatewayDep = Annotated[Gateway, Depends(get_gateway)]


#: The body of ``POST /v1/runs/{id}/interrupts`` and ``POST /v1/dags/{id}/interrupts``.
__all__ = ["Gateway", "GatewayDep", "IdPath", "IdQuery", "InterruptIn", "ThreadIdPath", "ThreadIdQuery",
           "get_gateway"]


# -- what the routers' signatures share ---------------------------------------------------------

#: The id of a run, DAG or batch (anything the server names) in a path or a filter, checked
#: before it is used to build a Redis key (``ID:events`` is a 422, not a read). One pattern
#: for every such id.
ID_DESCRIPTION = "an id the server handed out: letters, digits, '_', '-', '.' (at most 128)"
IdPath = Annotated[str, Path(pattern=ID_PATTERN, max_length=128, description=ID_DESCRIPTION)]
IdQuery = Annotated[str | None, Query(pattern=ID_PATTERN, max_length=128, description=ID_DESCRIPTION)]
#: A thread id is the caller's name for a conversation (``RunRequest.thread_id``), not an id
#: the server made: its own pattern, the same in the body, the path and the filter.
THREAD_DESCRIPTION = "a thread name: letters, digits, '.', '_', ':', '-' (at most 200)"
ThreadIdPath = Annotated[str, Path(pattern=THREAD_ID_PATTERN, max_length=200, description=THREAD_DESCRIPTION)]
ThreadIdQuery = Annotated[str | None, Query(pattern=THREAD_ID_PATTERN, max_length=200,
                                            description=THREAD_DESCRIPTION)]
#: A listing's page size and cursor (the same for runs, DAGs and batches).
LimitQuery = Annotated[int, Query(ge=1, le=500, description="rows per page (1..500)")]
CursorQuery = Annotated[str | None, Query(max_length=600, description="the `next_cursor` of the previous page")]


#: An SSE route's cursor: ``?after=`` or, on a reconnect, the ``Last-Event-ID`` header.
AfterQuery = Annotated[str | None, Query(description="resume after this stream id (`<ms>` or `<ms>-<seq>`)",
                                         max_length=41)]
LastEventId = Annotated[str | None, Header(description="resume after this stream id (a reconnect)",
                                           max_length=41)]
