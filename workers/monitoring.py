"""Celery task events only while a monitor listens (``REACTQ_TASK_EVENTS``, default ``auto``).

Task events (``task-received``, ``-started``, ``-succeeded``, …) are what Flower shows; each is a
message on the broker, and together they cost a bare task about 30 % of its CPU
(``bench/README.md``, "Where a turn goes"). A worker therefore starts without them
(``worker_send_task_events`` off, ``reactq.shared.wire``; its heartbeats still go out, so a
monitor sees the worker at once), and a monitor turns them on over the control channel with
``enable_events``: Flower broadcasts it every 5 s while it runs, so it sees every task from its
first seconds on.

``auto``: a worker turns its task events off again once nobody has asked for them for
``QUIET_S`` seconds (Flower was stopped). ``on``: always on, from the start (Celery's own
behaviour with ``-E``; for a monitor that asks only once, such as ``celery events``). ``off``: an
``enable_events`` is answered, and refused.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from celery.worker import control

from reactq.shared.settings import Settings

log = logging.getLogger(__name__)

QUIET_S = 60.0
"""``auto``: task events stop this long after the last ``enable_events``."""

_celery_enable = control.Panel.data["enable_events"]


class Asked:
    """When a monitor last asked this worker for task events, and the thread that turns them
    off once it stops asking."""

    def __init__(self, quiet_s: float = QUIET_S) -> None:
        self.quiet_s = quiet_s
        self.last = 0.0
        self.consumer: Any = None
        self.lock = threading.Lock()
        self.watching = False

    def ask(self, consumer: Any) -> None:
        with self.lock:
            self.last, self.consumer = time.monotonic(), consumer
            if self.watching:
                return
            self.watching = True
        threading.Thread(target=self._watch, name="reactq-task-events", daemon=True).start()

    def quiet(self) -> bool:
        """Turn task events off if nobody asked within ``quiet_s``; True when it did."""
        with self.lock:
            if time.monotonic() - self.last < self.quiet_s:
                return False
            self.watching = False
            dispatcher = getattr(self.consumer, "event_dispatcher", None)
        if dispatcher is not None and dispatcher.groups and "task" in dispatcher.groups:
            dispatcher.groups.discard("task")
            log.info("task events off: no monitor asked for them in %.0f s", self.quiet_s)
        return True

    def _watch(self) -> None:
        while not self.quiet():
            time.sleep(self.quiet_s / 4)


asked = Asked()
_mode: str | None = None


def mode() -> str:
    """``REACTQ_TASK_EVENTS`` of this worker (read once)."""
    global _mode
    if _mode is None:
        _mode = Settings().task_events
    return _mode


def enable_events(state: Any) -> Any:
    """Celery's ``enable_events``, as ``REACTQ_TASK_EVENTS`` says (see the module)."""
    if mode() == "off":
        return control.nok("task events are off on this worker (REACTQ_TASK_EVENTS=off)")
    reply = _celery_enable(state)
    if mode() == "auto":
        asked.ask(state.consumer)
    return reply


_register: Any = control.control_command()
_register(enable_events)  # replaces Celery's own, by name
