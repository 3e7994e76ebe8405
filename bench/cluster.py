"""The real processes a benchmark runs on: Redis, the scripted LLM server, Celery workers.

Everything is started here on free loopback ports and stopped again by pid (each child is
the leader of its own process group, so a worker's pool children go with it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from reactq.shared.redisconn import free_port, server_binary, start_server
from reactq.shared.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
QUEUES = "reactq.runs,reactq.tools"


@dataclass
class WorkerSpec:
    """How many worker processes, which pool, how many slots each."""

    count: int = 2
    pool: str = "threads"
    concurrency: int = 8
    env: dict[str, str] = field(default_factory=dict)

    @property
    def slots(self) -> int:
        return self.count * self.concurrency

    def describe(self) -> str:
        return f"{self.count} × {self.pool} c={self.concurrency}"


@dataclass
class Worker:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def rss_bytes(self) -> int:
        """Resident memory of the worker and its pool children (prefork)."""
        return sum(_rss(pid) for pid in _tree(self.proc.pid))


class Cluster:
    """Redis + scripted server + workers. Use as a context manager."""

    def __init__(self, *, llm_delay: float = 0.0) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="reactq-bench-"))
        self.llm_delay = llm_delay
        self.redis_proc: subprocess.Popen[bytes] | None = None
        self.llm_proc: subprocess.Popen[bytes] | None = None
        self.workers: list[Worker] = []
        self.spec = WorkerSpec()
        self.redis_url = ""
        self.llm_url = ""
        self.redis_binary = ""

    # -- lifecycle ------------------------------------------------------------
    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        port = free_port()
        self.redis_binary = server_binary()
        self.redis_proc = start_server(port, self.tmp / "redis")
        self.redis_url = f"redis://127.0.0.1:{port}/0"
        self._start_llm()

    def stop(self) -> None:
        self.stop_workers()
        for proc in (self.llm_proc, self.redis_proc):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()

    def _start_llm(self) -> None:
        port = free_port()
        env = dict(os.environ, PYTHONPATH=str(ROOT), BENCH_LLM_DELAY=str(self.llm_delay))
        log = (self.tmp / "llm.log").open("wb")
        self.llm_proc = subprocess.Popen(
            [sys.executable, "-m", "tests.scripted_server", "--port", str(port),
             "--script", "bench.script:handler"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.llm_url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.llm_url}/models", timeout=1):
                    return
            except OSError:
                if self.llm_proc.poll() is not None:
                    break
                time.sleep(0.05)
        raise RuntimeError(f"scripted server did not start:\n{(self.tmp / 'llm.log').read_text()}")

    # -- workers --------------------------------------------------------------
    def worker_env(self, extra: dict[str, str]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("REACTQ_", "OPENAI_"))}
        env.update(
            REACTQ_REDIS_URL=self.redis_url, OPENAI_BASE_URL=self.llm_url,
            OPENAI_API_KEY="bench-key", REACTQ_MODEL="scripted",
            REACTQ_TOOLS="bench.tools:TOOLS", PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1",
            REACTQ_DEMO_TOOLS="true",  # the scenarios call echo and sleep
        )
        env.update(extra)
        return env

    def start_workers(self, spec: WorkerSpec, timeout: float = 60.0) -> None:
        """(Re)start the worker set; returns once every worker answers a ping."""
        self.stop_workers()
        self.spec = spec
        tag = uuid.uuid4().hex[:4]
        for i in range(spec.count):
            name = f"bench{i}-{tag}"
            log = self.tmp / f"{name}.log"
            cmd = [sys.executable, "-m", "celery", "-A", "bench.celeryapp", "worker", "-Q", QUEUES,
                   "--pool", spec.pool, "-c", str(spec.concurrency), "-n", f"{name}@%h",
                   "--without-mingle", "--without-gossip", "-l", "WARNING"]
            proc = subprocess.Popen(cmd, cwd=ROOT, env=self.worker_env(spec.env),
                                    stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                    start_new_session=True)
            self.workers.append(Worker(name, proc, log))
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        from reactq.dispatcher.client import Dispatcher

        d = Dispatcher(self.settings())
        want = {w.name for w in self.workers}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for w in self.workers:
                if w.proc.poll() is not None:
                    raise RuntimeError(f"worker {w.name} exited:\n{w.log.read_text()[-3000:]}")
            seen = {n.split("@")[0] for n in d.workers_seen(timeout=0.5)}
            if want <= seen:
                return
        raise RuntimeError(f"workers not ready within {timeout}s")

    def stop_workers(self) -> None:
        for w in self.workers:
            w.stop()
        self.workers = []

    def worker_rss(self) -> list[int]:
        return [w.rss_bytes() for w in self.workers]

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds (user + system) used so far by the workers, the LLM server, Redis."""
        workers = sum(_cpu(pid) for w in self.workers for pid in _tree(w.proc.pid))
        return {"workers": workers,
                "llm_server": _cpu(self.llm_proc.pid) if self.llm_proc else 0.0,
                "redis": _cpu(self.redis_proc.pid) if self.redis_proc else 0.0}

    # -- clients --------------------------------------------------------------
    def settings(self, **overrides: Any) -> Settings:
        return Settings(redis_url=self.redis_url, model="scripted", openai_base_url=self.llm_url,
                        openai_api_key="bench-key", tools="bench.tools:TOOLS", demo_tools=True,
                        **overrides)

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url)

    def reset(self) -> None:
        """After a failed figure: stop the workers, drop queued and unacked messages and runs."""
        self.stop_workers()
        r = self.redis()
        # kombu keeps one list per priority step ("reactq.runs", "reactq.runs\x06\x163", …)
        queues = [k for q in ("reactq.runs", "reactq.tools") for k in r.scan_iter(match=f"{q}*")]
        r.delete(*queues, "unacked", "unacked_index", "unacked_mutex")
        self.flush()

    def flush(self) -> None:
        """Delete the runs and bench keys of earlier figures (queues and bindings stay)."""
        r = self.redis()
        for pattern in ("reactq:run:*", "reactq:runs", "bench:*"):
            batch = []
            for key in r.scan_iter(match=pattern, count=1000):
                batch.append(key)
                if len(batch) >= 1000:
                    r.unlink(*batch)
                    batch = []
            if batch:
                r.unlink(*batch)


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _tree(pid: int) -> list[int]:
    out = [pid]
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                for child in f.read().split():
                    out += _tree(int(child))
    except OSError:
        pass
    return out
