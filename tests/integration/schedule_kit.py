"""Real ``reactq scheduler`` processes for the schedule tests, and what the tests count.

Each test gets its own Redis database (state and broker) with a fresh key prefix, so only
its own schedulers and workers see its schedules and runs.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from reactq.dispatcher.client import Dispatcher
from reactq.dispatcher.schedules import Schedules
from reactq.shared.keys import Keys
from reactq.shared.settings import Settings
from reactq.shared.stores.schedules import ScheduleStore
from tests.integration.conftest import ROOT, Backend, LLMFixture, WorkerFactory, stop_together, worker_env

#: Databases of their own (other test files flush theirs at start, as these do).
_DBS = itertools.cycle([10, 11])


@dataclass
class Scheduler:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def holds_lock(self) -> bool:
        return "beat: Acquired lock" in self.text()

    def kill(self) -> None:
        """kill -9: no lock released, nothing flushed."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


@dataclass
class Site:
    """One test's database: its settings, schedule service, schedulers and workers."""

    url: str
    env: dict[str, str]
    settings: Settings
    llm: LLMFixture
    tmp: Path
    started: list[Scheduler] = field(default_factory=list)

    @property
    def keys(self) -> Keys:
        return Keys(self.settings.key_prefix)

    @property
    def r(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    @property
    def schedules(self) -> Schedules:
        return Schedules(Dispatcher(self.settings))

    @property
    def store(self) -> ScheduleStore:
        return ScheduleStore(self.r, self.keys)

    def process_env(self, **extra: str) -> dict[str, str]:
        return worker_env(self.url, self.llm, **{**self.env, "REACTQ_KEY_PREFIX": self.settings.key_prefix, **extra})

    def scheduler(self, name: str, **extra: str) -> Scheduler:
        """``reactq scheduler`` as a real process (not waited for)."""
        log = self.tmp / f"scheduler-{name}.log"
        proc = subprocess.Popen([sys.executable, "-m", "reactq.dispatcher", "scheduler"], cwd=ROOT,
                                env=self.process_env(**extra), stdout=log.open("wb"),
                                stderr=subprocess.STDOUT, start_new_session=True)
        s = Scheduler(name, proc, log)
        self.started.append(s)
        return s

    def workers(self, name: str = "w", **extra: str) -> WorkerFactory:
        factory = WorkerFactory(self.url, self.llm, self.tmp, {**self.env, "REACTQ_KEY_PREFIX": self.settings.key_prefix,
                                                               **extra})
        factory.start(name, concurrency=2)
        self._factories.append(factory)
        return factory

    _factories: list[WorkerFactory] = field(default_factory=list)

    def ticks(self, schedule_id: str) -> Counter[str]:
        """How many runs each tick (``scheduled_for``) of the schedule has."""
        ids = [m.decode() for m in self.r.zrange(self.keys.runs_schedule(schedule_id), 0, -1)]
        found: Counter[str] = Counter()
        for rid in ids:
            tick = self.r.hget(self.keys.run(rid), "scheduled_for")
            found[tick.decode() if tick else "(trigger)"] += 1
        return found

    def run_ids(self, schedule_id: str) -> list[str]:
        return [m.decode() for m in self.r.zrange(self.keys.runs_schedule(schedule_id), 0, -1)]

    def close(self) -> None:
        stop_together([s.proc for s in self.started] + [w.proc for f in self._factories for w in f.started])


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def site(backend: Backend, llm: LLMFixture, tmp_path: Path) -> Iterator[Site]:
    url, env = backend.isolated(next(_DBS))
    redis.Redis.from_url(url).flushdb()
    settings = Settings(redis_url=url, model="scripted", tools="tests.integration.tools:TOOLS", demo_tools=True,
                        openai_api_key="test-key", openai_base_url=llm.server.base_url,
                        key_prefix=f"rq-{uuid.uuid4().hex[:6]}:", **backend.settings(env))
    s = Site(url, env, settings, llm, tmp_path)
    yield s
    s.close()
