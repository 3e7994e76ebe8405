"""How the door sends a task: ``Send`` enqueues by task name, a Celery app's ``send_task``
(``celery_send``) in the gateway, the CLI and the scheduler, the worker's own app in a worker.
The stores it writes are one ``Stores`` bundle per process (``reactq.shared.stores.bundle``).
"""

from __future__ import annotations

from typing import Any, Protocol

from reactq.shared.settings import Settings
from reactq.shared.wire import RUNS_QUEUE, celery_config

__all__ = ["Send", "celery_send"]


class Send(Protocol):
    """Enqueue the task ``task`` by name with JSON ``args`` (``priority``: the message's)."""

    def __call__(self, task: str, args: list[Any], queue: str = RUNS_QUEUE, *,
                 priority: int | None = None) -> None: ...


def celery_send(settings: Settings, name: str = "reactq-door") -> Send:
    """A ``Send`` over a Celery app of its own (no task code imported; built on first use)."""
    holder: list[Any] = []

    def send(task: str, args: list[Any], queue: str = RUNS_QUEUE, *, priority: int | None = None) -> None:
        if not holder:
            from celery import Celery

            app = Celery(name)
            app.conf.update(celery_config(settings))
            holder.append(app)
        options = {"priority": priority} if priority else {}
        holder[0].send_task(task, args=args, queue=queue, argsrepr=repr(args), kwargsrepr="{}", **options)

    return send
