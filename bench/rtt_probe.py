"""Counts Redis round trips in this process, by task and by the code that made them.

Imported by ``bench.celeryapp`` when ``BENCH_RTT_DIR`` is set (``python -m bench.rtt`` does
that). A round trip is one ``send_packed_command`` of a redis-py connection: one command,
one pipeline (however many commands it holds) or one script call; a script that the server
did not know (``NOSCRIPT``, then ``SCRIPT LOAD``, then the call again) counts three, as it
costs three. Replies are not counted separately (each send waits for its replies).

Each send is attributed to

* the Celery task running on this thread (``task_prerun`` / ``task_postrun``), else
  ``-`` (the watchdog, the lease heartbeat, the consumer loop: background work);
* the first frame outside redis-py: ``broker`` when it is kombu's or Celery's own traffic
  (publishing the next task, acks, task events), else ``<file>:<function>`` of reactq's
  code (``shared/stores/runs.py:commit``).

Every 0.2 s the counts are written to ``$BENCH_RTT_DIR/<pid>.json`` (the driver sums them).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

from celery import signals
from redis.connection import AbstractConnection

ROOT = str(Path(__file__).resolve().parents[1]) + os.sep
_BROKER = (f"{os.sep}kombu{os.sep}", f"{os.sep}celery{os.sep}")
# redis-py itself and reactq's own plumbing (the caller of a pipeline helper is the source).
_SKIP = (f"{os.sep}redis{os.sep}", f"{os.sep}shared{os.sep}redisconn.py",
         f"{os.sep}shared{os.sep}roundtrip.py", f"{os.sep}rtt_probe.py")

_PING = b"\r\nPING\r\n"
_counts: Counter[str] = Counter()
_lock = threading.Lock()
_local = threading.local()


def where(frame: FrameType | None) -> str:
    """``broker``, ``<file>:<function>`` of the nearest reactq frame, or ``other``."""
    while frame is not None:
        name = frame.f_code.co_filename
        if not any(s in name for s in _SKIP):
            if any(s in name for s in _BROKER):
                return "broker"
            if name.startswith(ROOT):
                return f"{name[len(ROOT):]}:{frame.f_code.co_name}"
        frame = frame.f_back
    return "other"


def install(out_dir: str) -> None:
    original = AbstractConnection.send_packed_command

    def counted(self: Any, command: Any, check_health: bool = True) -> None:
        task = getattr(_local, "task", None) or "-"
        # redis-py's health check (a PING before a command on a connection idle for
        # ``health_check_interval`` s) is the connection's, not the code's that sent next.
        head = command if isinstance(command, bytes) else (command[0] if command else b"")
        source = "health-check" if _PING in bytes(head[:32]) else where(sys._getframe(1))
        key = f"{task}|{source}"
        with _lock:
            _counts[key] += 1
        return original(self, command, check_health)

    AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]
    signals.task_prerun.connect(_task_started, weak=False)
    signals.task_postrun.connect(_task_ended, weak=False)
    threading.Thread(target=_dump, args=(Path(out_dir),), daemon=True, name="bench-rtt-dump").start()


def _task_started(sender: Any = None, **_: Any) -> None:
    _local.task = getattr(sender, "name", None)


def _task_ended(**_: Any) -> None:
    _local.task = None


def _dump(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{os.getpid()}.json"
    while True:
        with _lock:
            data = dict(_counts)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)
        time.sleep(0.2)
