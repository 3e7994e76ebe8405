"""Celery task events go out only while a monitor asks for them (``REACTQ_TASK_EVENTS=auto``):
a worker started without ``-E`` sends its heartbeats but no task events until an
``enable_events`` (what Flower broadcasts every 5 s) reaches it."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from reactq.shared.wire import WEBHOOK

pytestmark = pytest.mark.integration

PROBE_QUEUE = "reactq.probe"


class Captured:
    """Every event on the broker, as a monitor receives it."""

    def __init__(self, app: Any) -> None:
        self.events: list[dict[str, Any]] = []
        self._conn = app.connection_for_read()
        self._recv = app.events.Receiver(self._conn, handlers={"*": self.events.append})
        self._thread = threading.Thread(target=self._capture, daemon=True)

    def _capture(self) -> None:
        self._recv.capture(limit=None, timeout=None, wakeup=False)

    def __enter__(self) -> Captured:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._recv.should_stop = True
        self._thread.join(5)
        self._conn.release()

    def of(self, hostname: str, prefix: str) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e.get("hostname") == hostname and e["type"].startswith(prefix)]


def _wait(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(what)


@pytest.fixture
def probe_worker(worker_factory: Any) -> Iterator[str]:
    """A worker with the default ``REACTQ_TASK_EVENTS`` and no ``-E``, alone on its queue."""
    yield worker_factory.start(queues=PROBE_QUEUE, concurrency=1, task_events=False).name


def _ran(app: Any, hostname: str) -> int:
    stats = app.control.inspect(destination=[hostname], timeout=2).stats() or {}
    return int((stats.get(hostname) or {}).get("total", {}).get(WEBHOOK, 0))


def test_task_events_flow_only_once_a_monitor_asks(dispatcher: Any, probe_worker: str) -> None:
    app = dispatcher.celery
    with Captured(app) as seen:
        hostname = _wait(lambda: next((e["hostname"] for e in list(seen.events)
                                       if e["type"] == "worker-heartbeat"
                                       and e["hostname"].startswith(probe_worker + "@")), None),
                         15, "the worker sent no heartbeat: monitors would not see it")

        # A delivery of an unknown webhook message: the task runs and finds nothing to send.
        dispatcher.send(WEBHOOK, [f"probe{uuid.uuid4().hex}"], queue=PROBE_QUEUE)
        _wait(lambda: _ran(app, hostname) == 1, 15, "the probe task did not run")
        time.sleep(0.5)
        assert seen.of(hostname, "task-") == []

        replies = app.control.enable_events(destination=[hostname], reply=True, timeout=5)
        assert replies and "enabled" in str(replies)
        dispatcher.send(WEBHOOK, [f"probe{uuid.uuid4().hex}"], queue=PROBE_QUEUE)
        got = _wait(lambda: [e["type"] for e in seen.of(hostname, "task-")
                             if e["type"] == "task-succeeded"], 15, "no task events once asked")
        assert got == ["task-succeeded"]
        assert {e["type"] for e in seen.of(hostname, "task-")} >= {"task-received", "task-started"}
