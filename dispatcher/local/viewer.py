"""Where the run viewer is, and a gateway process for ``make demo`` to show it.

``reactq serve`` prints ``viewer_url(host, port)``; the demo starts the gateway beside its
workers with ``start_gateway`` and prints the same URL, so the batch can be watched live.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from reactq.shared.settings import environment


def viewer_url(host: str, port: int) -> str:
    """The viewer's URL as a browser on this machine reaches it (0.0.0.0 → 127.0.0.1)."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/ui/"


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as res:  # noqa: S310 (our own local URL)
            return bool(res.status == 200)
    except OSError:
        return False


def start_gateway(redis: str, port: int, log_path: Path, *, flower_url: str | None = None,
                  timeout: float = 30.0) -> tuple[subprocess.Popen[bytes], str] | None:
    """``uvicorn reactq.dispatcher.http:create_app`` on 127.0.0.1:``port``; (process, viewer
    URL), or None when it did not come up (the demo goes on without it)."""
    env = environment()
    env["REACTQ_REDIS_URL"] = redis
    if flower_url:
        env["REACTQ_FLOWER_URL"] = flower_url
    cmd = [sys.executable, "-m", "uvicorn", "--factory", "reactq.dispatcher.http:create_app",
           "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
           "--timeout-graceful-shutdown", "2"]
    proc = subprocess.Popen(cmd, env=env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=os.getcwd())
    url = viewer_url("127.0.0.1", port)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None
        if _answers(url):
            return proc, url
        time.sleep(0.25)
    proc.kill()
    proc.wait()
    return None
