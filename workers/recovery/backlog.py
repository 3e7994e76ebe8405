"""When a queue was last seen with nothing waiting: what keeps a backlog from breeding resends.

The due watchdog (``workers/recovery/watchdog.py``) and the stall sweeper (``workers/recovery/sweeper.py``) resend
work that nobody took up within a bound. With thousands of runs submitted at once, every
queued step waits longer than that bound *in the queue*, and resending it only adds a
duplicate behind it: measured (``python -m bench P3``), 5,000 runs made 11.8 tasks a run
instead of 6, and throughput fell from 32 runs/s at 100 runs to 19.5 at 5,000.

A message sent before a moment at which its queue had nothing waiting has been delivered
(or lost on the way): only then is a resend useful. So each watchdog polls its queues'
ready-message counts (kombu's passive ``queue_declare``: the Redis transport sums the
priority lists, RabbitMQ counts ready messages; messages a worker holds are not counted)
and resends a member only if its queue was seen empty since the member was last sent or
deferred. The cost: a lost message waits until its queue drains once, which a queued one
must do anyway. A holder that died is resent at once, whatever the queue holds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from amqp.exceptions import ChannelError

log = logging.getLogger(__name__)

#: ``queue name → messages waiting`` (raises when the broker cannot say).
Depth = Callable[[str], int]


class Backlog:
    """Per queue, the last time it was seen with no message waiting."""

    def __init__(self, depth: Depth, clock: Callable[[], float] = time.time) -> None:
        self.depth = depth
        self.clock = clock
        self.clear_at: dict[str, float] = {}

    def poll(self, queues: Iterable[str]) -> None:
        """Look at each queue now. A broker that cannot answer counts as clear: resending
        as before is safe (duplicates are harmless), waiting on an unknown is not."""
        now = self.clock()
        for queue in queues:
            try:
                waiting = self.depth(queue)
            except Exception:  # the broker away, a transport that cannot count
                log.debug("backlog: cannot count %s", queue, exc_info=True)
                waiting = 0
            if waiting == 0:
                self.clear_at[queue] = now

    def clear_since(self, queue: str, since: float) -> bool:
        """Whether ``queue`` was seen with nothing waiting at or after ``since`` (seconds)."""
        return self.clear_at.get(queue, float("-inf")) >= since


def broker_depth(app: object) -> Depth:
    """Ready messages in a queue, through a pooled broker connection of the Celery ``app``.

    A queue that does not exist holds nothing (kombu's Redis transport drops an emptied
    queue's lists, and answers a passive declare of it with 404 as RabbitMQ does). On AMQP
    that 404 closes the channel, so the count gets a channel of its own there."""
    def depth(queue: str) -> int:
        with app.pool.acquire(block=True) as conn:  # type: ignore[attr-defined]
            redis_transport = conn.transport.driver_type == "redis"
            channel = conn.default_channel if redis_transport else conn.channel()
            try:
                return int(channel.queue_declare(queue=queue, passive=True).message_count)
            except ChannelError as exc:
                if str(getattr(exc, "reply_code", "")) == "404":
                    return 0
                raise
            finally:
                if not redis_transport:
                    channel.close()
    return depth
