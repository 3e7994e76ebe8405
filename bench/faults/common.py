"""Helpers of the fault modules: a gateway process with extra settings, a Redis that can be
restarted with its append-only file, percentiles."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from bench.cluster import ROOT, Cluster
from reactq.shared.redisconn import start_server

#: What every fault module's processes get: the demo tools (``echo``) are opt-in.
BASE_ENV = {"REACTQ_DEMO_TOOLS": "true"}


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


class GatewayProc:
    """``uvicorn --factory reactq.dispatcher.http:create_app`` on a free port."""

    def __init__(self, cl: Cluster, extra: dict[str, str] | None = None) -> None:
        from reactq.shared.redisconn import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = cl.tmp / f"gateway-{self.port}.log"
        env = cl.worker_env({**BASE_ENV, **(extra or {})})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "reactq.dispatcher.http:create_app",
             "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning",
             "--no-access-log", "--backlog", "4096"],
            cwd=ROOT, env=env, stdout=self.log.open("wb"), stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=1):
                    return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the gateway did not start:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class AofRedis:
    """A Redis-compatible server with AOF on a fixed port, stopped and started again."""

    def __init__(self, port: int, data_dir: Path) -> None:
        self.port = port
        self.dir = data_dir
        self.url = f"redis://127.0.0.1:{port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = start_server(self.port, self.dir, persist=True)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(10)


def use_aof_redis(cl: Cluster) -> AofRedis:
    """Replace the cluster's (non-persistent) Redis by one with AOF on the same port."""
    assert cl.redis_proc is not None
    port = int(cl.redis_url.rsplit(":", 1)[1].split("/")[0])
    os.killpg(cl.redis_proc.pid, signal.SIGTERM)
    cl.redis_proc.wait(10)
    srv = AofRedis(port, cl.tmp / "redis-aof")
    srv.start()
    cl.redis_proc = srv.proc
    return srv
