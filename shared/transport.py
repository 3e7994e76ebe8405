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
"""

from __future__ import annotations

from typing import Any

from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis

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


class Transport(kombu_redis.Transport):
    Channel = Channel


def install() -> None:
    """Make ``redis://`` and ``rediss://`` broker URLs use :class:`Transport` (idempotent)."""
    for scheme in ("redis", "rediss"):
        TRANSPORT_ALIASES[scheme] = TRANSPORT
