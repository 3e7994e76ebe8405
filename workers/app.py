"""The Celery app (``celery -A reactq.workers.app worker``), configured safe by default.

* JSON only: ``accept_content=["json"]``; a pickled message is refused, not run.
* ``task_acks_late`` + ``task_reject_on_worker_lost``: a task whose worker dies is
  delivered again. ``worker_prefetch_multiplier=1``: a worker holds no more than it runs.
* Task events for Flower while it listens (``REACTQ_TASK_EVENTS``, ``workers/monitoring.py``).
* Queues ``reactq.runs`` (iterate, answer, dag), ``reactq.tools`` (tool calls) and
  ``reactq.webhooks`` (webhook deliveries, ``workers/webhooks.py``).
* ``visibility_timeout`` (``REACTQ_VISIBILITY_TIMEOUT``, default 3600 s) is deliberately
  longer than any step may take, so the broker never re-delivers a step that is still
  running. Crash recovery does not wait for it: every commit records what is due next
  (``reactq:due``, in the same Lua script), each running task holds a short lease in Redis
  (``REACTQ_LEASE_SECONDS``, 3 s, heartbeat every second), and every worker's watchdog
  re-sends what is due and neither started within the bound nor held by a live lease (see
  ``workers/recovery/watchdog.py``).
"""

from __future__ import annotations

from celery import Celery, signals

from reactq.shared.errors import ConfigError
from reactq.shared.settings import Settings
from reactq.workers import kombufix
from reactq.shared.wire import celery_config

kombufix.apply()  # a broker outage must not make the worker exit (see the module)

app = Celery("reactq", include=["reactq.workers.runs.tasks", "reactq.workers.dags.tasks", "reactq.workers.otel",
                                  "reactq.workers.alive", "reactq.workers.monitoring"])
_settings = Settings()
if _settings.redis_url or _settings.broker_url:
    app.conf.update(celery_config(_settings))
else:
    # Importing the app starts nothing; a worker started with nothing configured says what to set
    # (``reactq worker`` starts the embedded Valkey first and exports its URL).
    def _unconfigured(**_: object) -> None:
        raise ConfigError("REACTQ_REDIS_URL is not set: point it at the Redis the gateway uses, "
                          "or start the worker with `reactq worker`, which starts an embedded Valkey")

    signals.celeryd_init.connect(_unconfigured, weak=False)
