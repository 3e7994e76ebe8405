"""reactq's Redis broker transport: one redis client per channel, not one per publish.

Pins the kombu seams ``reactq.shared.transport`` relies on, so an upgrade that moves them
fails here rather than silently bringing the per-publish client back.
"""

from __future__ import annotations

import uuid

import pytest
import redis
from celery import Celery

from reactq.shared.settings import Settings
from reactq.shared.wire import celery_config
from reactq.shared.transport import Channel, Transport

pytestmark = pytest.mark.integration


def test_a_celery_app_on_a_redis_url_publishes_through_one_client(redis_url: str, monkeypatch) -> None:
    app = Celery("reactq-transport-test")
    app.conf.update(celery_config(Settings(redis_url=redis_url)))
    created: list[int] = []
    original = redis.Redis.__init__

    def counting_init(self: redis.Redis, *args, **kwargs) -> None:
        created.append(1)
        original(self, *args, **kwargs)

    queue = f"transport-test-{uuid.uuid4().hex[:8]}"
    with app.connection_for_write() as conn:
        assert isinstance(conn.transport, Transport)
        assert isinstance(conn.default_channel, Channel)
        monkeypatch.setattr(redis.Redis, "__init__", counting_init)
        with app.producer_or_acquire() as producer:
            for i in range(50):
                app.send_task("reactq.test.noop", args=[i], queue=queue, producer=producer)
    assert len(created) <= 2, f"{len(created)} redis clients for 50 publishes"
    r = redis.Redis.from_url(redis_url)
    assert r.llen(queue) == 50
    r.delete(queue)


def test_the_watchdog_counts_what_waits_in_a_queue_of_every_priority(redis_url: str) -> None:
    """``workers/recovery/backlog.py`` reads a queue's depth through kombu: priority lists included,
    so a backlog of batch runs (low priority) defers resends as much as interactive ones."""
    from reactq.workers.recovery.backlog import broker_depth

    app = Celery("reactq-backlog-test")
    app.conf.update(celery_config(Settings(redis_url=redis_url)))
    queue = f"backlog-test-{uuid.uuid4().hex[:8]}"
    depth = broker_depth(app)
    assert depth(queue) == 0
    for priority in (0, 3, 9, 0):
        app.send_task("reactq.test.noop", args=[priority], queue=queue, priority=priority)
    assert depth(queue) == 4
    assert depth(queue) == 4, "counting takes nothing off the queue"
    r = redis.Redis.from_url(redis_url)
    for key in r.scan_iter(f"{queue}*"):
        r.delete(key)
