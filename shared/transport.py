"""kombu's Redis transport with one synchronous client per channel.

kombu's Redis channel builds a new ``redis.Redis`` for every publish and every ack
(``Channel.conn_or_acquire`` → ``_create_client``), all over the same connection pool. Since
redis-py 8 each new client copies a response-callback table (redis/redis-py#3624): about
0.45 ms, five times a task on reactq's hot path. A client over a pool is thread-safe and
holds no connection of its own, so one per channel (rebuilt when kombu replaces the pool)
does the same work.

Registered as the transport for ``redis://`` and ``rediss://`` URLs (kombu resolves a URL's
scheme through ``TRANSPORT_ALIASES``) by ``reactq.shared.wire.celery_config``, which both sides
use: the workers consume through it and the dispatcher publishes through it.
``tests/integration/test_transport.py`` pins what this relies on: the channel class the Celery
app ends up with, and one client for many publishes, so a kombu upgrade that moves these seams
fails a test instead of silently undoing the fix.

``captured``: on the Redis broker a message is an entry LPUSHed to a list, so a step's commit
script can push the messages of what comes next itself, atomically with the commit
(``workers/runs/step.py``). Inside the block, what this thread publishes through this channel
is built by Celery and kombu as always (routing, priority, headers, the ``before_task_publish``
signal) and collected as (list key, payload) instead of sent.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis
from kombu.utils.json import dumps

_local = threading.local()


@contextmanager
def captured() -> Iterator[list[tuple[str, str]]]:
    """Messages this thread publishes on the Redis broker inside the block are collected as
    (list key, payload), not sent: the caller pushes them (``LPUSH key payload``) or drops them."""
    sink: list[tuple[str, str]] = []
    outer = getattr(_local, "sink", None)
    _local.sink = sink
    try:
        yield sink
    finally:
        _local.sink = outer

TRANSPORT = "reactq.shared.transport:Transport"


class Channel(kombu_redis.Channel):
    """kombu's channel; the synchronous client is kept while its connection pool lives."""

    _reactq_client: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        base: Any = super()  # kombu has no type hints
        if asynchronous:
            return base._create_client(asynchronous=True)
        client = self._reactq_client
        if client is None or client.connection_pool is not self.pool:
            client = self._reactq_client = base._create_client()
        return client


    def _put(self, queue: str, message: Any, **kwargs: Any) -> Any:
        """kombu's ``_put`` (``LPUSH`` to the queue's list for the message's priority), or, inside
        ``captured``, that list and payload collected instead."""
        base: Any = super()
        sink = getattr(_local, "sink", None)
        if sink is None or kwargs.get("_publish_batch") is not None or self.global_keyprefix \
                or (self._expires and queue in self._expires):
            return base._put(queue, message, **kwargs)
        chan: Any = self  # kombu has no type hints
        pri = chan._get_message_priority(message, reverse=False)
        sink.append((chan._q_for_pri(queue, pri), dumps(message)))
        return None


class Transport(kombu_redis.Transport):
    Channel = Channel


def install() -> None:
    """Make ``redis://`` and ``rediss://`` broker URLs use :class:`Transport` (idempotent)."""
    for scheme in ("redis", "rediss"):
        TRANSPORT_ALIASES[scheme] = TRANSPORT
