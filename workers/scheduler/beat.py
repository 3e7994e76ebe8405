"""The beat: ``celery beat`` with celery-redbeat's scheduler, firing schedules' ticks.

``celery -A reactq.workers.scheduler.app beat -S reactq.workers.scheduler.beat:ScheduleBeat``
(what ``reactq scheduler`` runs). Any number of them may run:

* At start each one takes celery-redbeat's lock (``{prefix}redbeat::lock``, a Redis lock with
  a TTL of ``REACTQ_SCHEDULER_LOCK_TIMEOUT_S``, 3 s) or waits for it, trying again every
  ``REACTQ_SCHEDULER_LOOP_S`` (1 s): one is active, the others stand by.
* The active one extends the lock at every turn of its loop (at least every loop interval),
  then fires what is due (``fire.Firer``). Killed (kill -9), it stops extending: its lock
  expires within the TTL and a standby takes it at its next try, so ticks resume within
  about TTL + loop interval (≈ 4 s); the ticks missed meanwhile fire then (catch-up).
* An active scheduler that finds its lock gone (it was frozen, or cut off from Redis, for
  longer than the TTL) fires nothing more and goes back to standing by until it holds the
  lock again. Were two to fire a tick anyway (one frozen in the middle of a tick), the
  tick's idempotency key and the compare-and-set on the schedule keep it to one run,
  counted once. Redis unreachable for a moment: the turn is skipped, the loop goes on.

Schedules are not redbeat entries: celery's ``crontab`` has no seconds field and no
wall-clock DST rule, so fire times come from ``reactq.shared.schedule.times`` and the due
schedules from ``schedules:due``. celery-redbeat provides the lock and the loop.
"""

from __future__ import annotations

import logging
from functools import cached_property
from typing import Any

import redis
from types import SimpleNamespace

from redbeat import RedBeatScheduler
from redbeat.schedulers import acquire_distributed_beat_lock

from reactq.shared.settings import Settings
from reactq.workers.scheduler.fire import Firer

log = logging.getLogger("reactq.scheduler")


class ScheduleBeat(RedBeatScheduler):  # type: ignore[misc]
    """redbeat's scheduler (lock, loop) whose every tick also fires reactq's due schedules."""

    @cached_property
    def firer(self) -> Firer:
        settings: Settings = self.app.reactq_settings
        return Firer(settings)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        try:
            if self.lock is None:  # Redis was unreachable at start: take the lock now
                acquire_distributed_beat_lock(SimpleNamespace(scheduler=self))
                return 0.0
            wait = float(super().tick(*args, **kwargs))  # extends the lock first (raises if it was lost)
        except redis.exceptions.LockError:
            self._stand_by()
            return 0.0
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("Redis unreachable, nothing fired this turn: %s", exc)
            return float(self.max_interval)
        try:
            until = self.firer.fire_due()
        except (redis.RedisError, OSError) as exc:
            log.warning("schedules not fired this turn: %s", exc)
            until = self.max_interval
        return max(0.0, min(wait, until, float(self.max_interval)))

    def _stand_by(self) -> None:
        """The lock was lost: wait, as a standby does, until this one holds it again (Redis
        unreachable meanwhile: the next turn tries again)."""
        log.warning("beat: lost the lock (another scheduler holds it or it expired); standing by")
        try:
            self.lock.acquire()  # blocking; a new token
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("Redis unreachable while standing by: %s", exc)
            return
        log.info("beat: Acquired lock")


__all__ = ["ScheduleBeat"]
