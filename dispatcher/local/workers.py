"""Local processes for the embedded default: worker processes started on demand.

``reactq run`` on a fresh machine has no workers: ``ensure_workers`` starts a detached
``celery -A reactq.workers.app worker`` (threads pool, every queue ``reactq worker`` consumes,
``reactq.webhooks`` included) whose log and pid live under
``<data_dir>/``, and ``stop_workers`` (``reactq down``) stops it again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from reactq.shared.errors import LocalServiceError
from reactq.shared.settings import child_env
from reactq.shared.redisconn import redis_url, stop_embedded
from reactq.shared.settings import Settings
from reactq.shared.wire import DEFAULT_QUEUES

PID_FILE = "workers.json"


def worker_command(*, queues: str = DEFAULT_QUEUES, pool: str = "threads",
                   concurrency: int = 8, name: str = "reactq@%h") -> list[str]:
    """The ``celery worker`` command line for reactq's queues (by default every queue:
    runs, tool calls, webhook deliveries)."""
    return [sys.executable, "-m", "celery", "-A", "reactq.workers.app", "worker", "-Q", queues,
            "--pool", pool, "-c", str(concurrency), "-n", name, "-l", "INFO"]


def ensure_workers(settings: Settings, *, count: int = 1, concurrency: int = 8,
                   timeout: float = 60.0, ping: bool = True) -> list[int]:
    """Start ``count`` local workers unless a worker already answers; returns new pids."""
    from reactq.dispatcher.client import Dispatcher

    d = Dispatcher(settings)
    if ping and d.workers_seen(timeout=1.0):
        return []
    env = child_env(settings, REACTQ_REDIS_URL=redis_url(settings))
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    pids = []
    for i in range(count):
        log = (settings.data_dir / f"worker-{i}.log").open("ab")
        # A lone local worker has no neighbours to sync with: skipping mingle saves ~1 s.
        cmd = worker_command(concurrency=concurrency, name=f"local{i}-{os.getpid()}@%h")
        proc = subprocess.Popen(
            cmd + ["--without-mingle", "--without-gossip"],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            cwd=os.getcwd(),
        )
        pids.append(proc.pid)
    _record(settings.data_dir, pids)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # limit=1: return on the first pong instead of waiting out the timeout.
        if d.celery.control.ping(timeout=0.5, limit=1):
            return pids
        time.sleep(0.2)
    raise LocalServiceError(f"local workers did not start within {timeout}s; see {settings.data_dir}/worker-*.log")


def _record(data_dir: Path, pids: list[int]) -> None:
    path = data_dir / PID_FILE
    known = json.loads(path.read_text()) if path.exists() else []
    path.write_text(json.dumps(known + pids))


def stop_workers(settings: Settings, *, embedded: bool = True) -> int:
    """Stop local workers started by ``ensure_workers`` (and the embedded server)."""
    path = settings.data_dir / PID_FILE
    stopped = 0
    if path.exists():
        for pid in json.loads(path.read_text()):
            try:
                os.killpg(pid, signal.SIGTERM)
                stopped += 1
            except (ProcessLookupError, PermissionError):
                pass
        path.unlink()
    if embedded and not settings.redis_url:
        stop_embedded(settings.data_dir)
    return stopped


def workers_answering(celery: Any) -> bool:
    """Does any worker answer a ping? ``limit=1`` returns on the first reply."""
    return bool(celery.control.ping(timeout=1.0, limit=1) or [])


def ensure_local_workers(settings: Settings, celery: Any, console: Any) -> None:
    """No worker answers ⇒ start one here (the embedded default: works on a fresh machine).

    Raises :class:`LocalServiceError` when it does not come up."""
    if workers_answering(celery):
        return
    console.print(f"[dim]no worker is running: starting a local one (log: {settings.data_dir}/worker-0.log; "
                  f"stop it with `reactq down`)[/]")
    ensure_workers(settings, ping=False)
