"""A worker must not exit because its broker went away (kombu's Redis transport bug).

When the broker connection drops, Celery releases the connection; closing the channel
restores its unacknowledged messages, which needs a Redis client built from
``connection.client`` — already ``None`` by then. kombu raises ``AttributeError`` ("'NoneType'
object has no attribute 'hostname'", celery/kombu#582, #970), which is not among the errors
its ``ignore_errors`` swallows, so the worker logs "Unrecoverable error" and shuts down.
Raising a connection error instead lets kombu treat it as what it is: the messages stay in
the ``unacked`` hash (restored later; reactq's stall sweeper resumes their runs) and the
consumer reconnects. Applied once, when ``reactq.workers.app`` is imported.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import redis as kredis

_PATCHED = "_reactq_patched"


def apply() -> None:
    channel = kredis.Channel
    if getattr(channel, _PATCHED, False):
        return
    original: Any = channel._connparams

    def _connparams(self: Any, asynchronous: bool = False) -> Any:
        if getattr(self.connection, "client", None) is None:
            raise redis.ConnectionError("the broker connection was already closed")
        return original(self, asynchronous=asynchronous)

    channel._connparams = _connparams  # type: ignore[method-assign]  # the patch itself
    setattr(channel, _PATCHED, True)
