"""Test-only fault points: stop or kill a worker at a chosen moment.

Off unless ``REACTQ_FAULT_POINTS`` is set (comma-separated ``point`` or ``point:task``, e.g.
``before_lease:reactq.tool,after_commit``); production pays one set lookup per point.

* ``REACTQ_FAULT_ACTION=stop`` (default): the first process to reach a listed point creates
  ``REACTQ_FAULT_FILE`` (exclusively, holding its pid) and stops itself with SIGSTOP; the
  test then kills it with -9. Any later arrival (another worker, the resend) goes on: each
  point fires once per file. ``REACTQ_FAULT_SKIP=N`` lets the first N arrivals in a process
  pass (e.g. 1 to stop at a run's second iterate, the fan-in).
* ``REACTQ_FAULT_ACTION=raise``: as ``stop``, but the first arrival raises instead (the
  task fails there and releases its lease normally: e.g. a step committed whose successor
  could not be sent).
* ``REACTQ_FAULT_ACTION=kill``: every arrival kills its own process with SIGKILL (a poison
  pill), optionally only for ``REACTQ_FAULT_KEY`` (a run id).

Points: ``before_lease`` (a task received its message and has not taken its lease),
``in_lease`` (a run's task holds its lease, before its step), ``after_commit`` (a step is
saved, its successor not yet sent).
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time

_POINTS = {p.strip() for p in os.environ.get("REACTQ_FAULT_POINTS", "").split(",") if p.strip()}
_FILE = os.environ.get("REACTQ_FAULT_FILE", "")
_SKIP = int(os.environ.get("REACTQ_FAULT_SKIP", "0") or 0)
_ACTION = os.environ.get("REACTQ_FAULT_ACTION", "stop")
_KEY = os.environ.get("REACTQ_FAULT_KEY", "")
_arrivals = itertools.count()


class FaultInjected(RuntimeError):
    """Raised at a fault point with ``REACTQ_FAULT_ACTION=raise`` (e.g. a send that fails)."""


def point(name: str, task: str = "", key: str = "") -> None:
    """Stop (or die) here if the test asked for it."""
    if not _POINTS or (name not in _POINTS and f"{name}:{task}" not in _POINTS):
        return
    if _KEY and key != _KEY:
        return
    if _ACTION == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if not _FILE or next(_arrivals) < _SKIP:
        return
    try:
        fd = os.open(_FILE, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.write(fd, f"{os.getpid()} {name} {task}".encode())
    os.close(fd)
    if _ACTION == "raise":
        raise FaultInjected(f"fault point {name} {task}".strip())
    # Stop at this very line: a SIGSTOP sent to the process may be taken by another thread
    # first, and this one would run on for a moment (far enough to take the lease). Sent to
    # this thread, it stops here; the sleep is a second guard (nothing past it runs).
    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
    while True:
        time.sleep(60)
