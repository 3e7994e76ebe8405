"""A liveness file for probes: touched when the worker is ready and on every worker heartbeat.

With ``REACTQ_WORKER_ALIVE_FILE`` set, a container's liveness probe can check that the file
is recent (``deploy/k8s/workers.yaml``): Celery sends its heartbeat from the consumer's own
event loop (every 2 s, with task events on, as ``reactq worker`` runs), so a worker whose
consumer hangs stops touching it. The heartbeat signal fires before the event is published,
so an outage of Redis or the broker does not make a live worker look dead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celery import signals

from reactq.shared.settings import Settings

_path: Path | None = Settings().worker_alive_file


def touch() -> None:
    """Mark the worker alive now (a no-op without ``REACTQ_WORKER_ALIVE_FILE``)."""
    if _path is not None:
        _path.parent.mkdir(parents=True, exist_ok=True)
        _path.touch()


def _touch(**_: Any) -> None:
    touch()


signals.worker_ready.connect(_touch, weak=False)
signals.heartbeat_sent.connect(_touch, weak=False)
