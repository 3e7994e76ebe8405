"""The soak's worker app: the bench app (reactq's own) plus a readiness mark in Redis, so
the soak kills only workers that are up (``bench:soak:ready:{node}`` = when it got ready)."""

from __future__ import annotations

import time
from typing import Any

import redis
from celery import signals

from bench.celeryapp import app
from reactq.shared.redisconn import redis_url
from reactq.shared.settings import Settings

__all__ = ["app"]


@signals.worker_ready.connect
def _mark_ready(sender: Any = None, **_: Any) -> None:
    node = getattr(sender, "hostname", "") or ""
    redis.Redis.from_url(redis_url(Settings())).set(f"bench:soak:ready:{node.split('@')[0]}",
                                                    time.time(), ex=3600)
