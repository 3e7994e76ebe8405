"""The scheduler's Celery app (``celery -A reactq.workers.scheduler.app beat``): the project's
Celery settings plus celery-redbeat's (Redis URL, key prefix, lock TTL) and a short loop."""

from __future__ import annotations

from typing import Any

from celery import Celery, signals

from reactq.shared.errors import ConfigError
from reactq.shared.keys import Keys
from reactq.shared.redisconn import redis_url
from reactq.shared.settings import Settings
from reactq.shared.wire import celery_config


def scheduler_config(settings: Settings) -> dict[str, Any]:
    """Celery's configuration for the beat: redbeat on the state Redis, reactq's prefix."""
    lock_s = max(1, round(settings.scheduler_lock_timeout_s))
    if lock_s <= settings.scheduler_loop_s:
        # The lock is renewed once per turn of the loop: a TTL no longer than a turn expires
        # under a healthy scheduler and hands it to a standby at every turn.
        raise ConfigError(f"REACTQ_SCHEDULER_LOCK_TIMEOUT_S ({lock_s}) must exceed "
                          f"REACTQ_SCHEDULER_LOOP_S ({settings.scheduler_loop_s})")
    conf = celery_config(settings)
    conf.update(
        redbeat_redis_url=redis_url(settings),
        redbeat_key_prefix=Keys(settings.key_prefix).redbeat_prefix,
        redbeat_lock_timeout=lock_s,
        redbeat_redis_options={"cluster": True} if settings.redis_cluster else {},
        beat_max_loop_interval=settings.scheduler_loop_s,
        beat_schedule={},
        result_expires=None,  # no ``celery.backend_cleanup`` entry: this beat sends no tasks of its own
    )
    return conf


def make_app(settings: Settings) -> Celery:
    app = Celery("reactq-scheduler")
    app.conf.update(scheduler_config(settings))
    app.reactq_settings = settings  # type: ignore[attr-defined]
    return app


def _app() -> Celery:
    """The beat's app; importing it starts and reaches nothing: without a Redis URL it is left
    unconfigured, and a beat started so says what to set (``reactq scheduler`` sets it)."""
    settings = Settings()
    if settings.redis_url:
        return make_app(settings)
    unconfigured = Celery("reactq-scheduler")

    def refuse(**_: object) -> None:
        raise ConfigError("REACTQ_REDIS_URL is not set: point it at the Redis the workers use, "
                          "or start the scheduler with `reactq scheduler`")

    signals.beat_init.connect(refuse, weak=False)
    return unconfigured


app = _app()
