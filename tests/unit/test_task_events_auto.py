"""``REACTQ_TASK_EVENTS=auto``: a worker turns task events off again once no monitor has asked
for them within the quiet period, and leaves a worker started with them on (``-E``) alone."""

from __future__ import annotations

import time
from types import SimpleNamespace

from reactq.workers.monitoring import Asked


def _consumer(groups: set[str] | None) -> SimpleNamespace:
    return SimpleNamespace(event_dispatcher=SimpleNamespace(groups=groups))


def test_task_events_stop_once_no_monitor_asks() -> None:
    asked = Asked(quiet_s=0.2)
    consumer = _consumer({"worker", "task"})
    asked.ask(consumer)
    assert not asked.quiet()
    time.sleep(0.1)
    asked.ask(consumer)  # Flower asks again: the quiet period starts over
    time.sleep(0.15)
    assert "task" in consumer.event_dispatcher.groups
    deadline = time.monotonic() + 2
    while "task" in consumer.event_dispatcher.groups and time.monotonic() < deadline:
        time.sleep(0.02)
    assert consumer.event_dispatcher.groups == {"worker"}
    assert not asked.watching


def test_a_worker_started_with_task_events_keeps_them() -> None:
    asked = Asked(quiet_s=0.05)
    consumer = _consumer(None)  # -E / REACTQ_TASK_EVENTS=on: every group
    asked.ask(consumer)
    time.sleep(0.2)
    assert asked.quiet()
    assert consumer.event_dispatcher.groups is None
