"""Submitting runs and watching them: what every Celery figure is built from."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import redis

from bench.script import Scenario
from reactq.dispatcher.client import Dispatcher, RunHandle
from reactq.shared.events import Event
from reactq.shared.keys import Keys

TERMINAL = (b"succeeded", b"failed", b"cancelled")


@dataclass
class Watched:
    """One run watched live: each event with the time this process received it."""

    run_id: str
    submitted: float  # perf_counter
    events: list[tuple[float, Event]] = field(default_factory=list)  # (time.time(), event)
    done_at: float = 0.0  # perf_counter when `done` arrived
    opened: float = 0.0  # time.time() when the consumer started reading

    @property
    def wall(self) -> float:
        return self.done_at - self.submitted

    def first(self, channel: str, after: float = 0.0, **match: Any) -> float:
        for at, ev in self.events:
            if at > after and ev.channel == channel and all(ev.data.get(k) == v for k, v in match.items()):
                return at
        raise LookupError(f"no {channel} {match} after {after}")

    def status(self) -> str:
        return str(self.events[-1][1].data.get("status")) if self.events else "?"


def request(sc: Scenario) -> dict[str, Any]:
    # The completion checklist (a one-time extra turn after ≥ 3 tool turns) is off, so
    # that every run has exactly `sc.turns` LLM turns.
    return {"query": sc.query(), "completion_check": False}


def run_watched(d: Dispatcher, sc: Scenario, *, prefix: str = "b", timeout: float = 60) -> Watched:
    """Submit one run and follow its events (blocking XREAD) until ``done``."""
    run_id = f"{prefix}{uuid.uuid4().hex}"
    t0 = time.perf_counter()
    h = d.submit(request(sc), run_id=run_id)
    w = Watched(run_id, t0, opened=time.time())
    for _, ev in h.events(block_ms=1000, timeout=timeout):
        w.events.append((time.time(), ev))
        if ev.channel == "done":
            w.done_at = time.perf_counter()
    if not w.done_at:
        raise TimeoutError(f"run {run_id} did not finish within {timeout}s")
    if w.status() != "succeeded":
        raise RuntimeError(f"run {run_id} ended {w.status()}: {w.events[-1][1].data}")
    return w


def submit_many(d: Dispatcher, sc: Scenario, n: int) -> list[str]:
    ids = []
    for _ in range(n):
        rid = uuid.uuid4().hex
        d.submit(request(sc), run_id=rid)
        ids.append(rid)
    return ids


def wait_all(r: redis.Redis, ids: list[str], timeout: float, poll: float = 0.25) -> dict[str, Any]:
    """Wait until every run is terminal. Returns the last ``updated_at`` (wall clock) and
    the count of runs per final status."""
    pending = list(ids)
    last = 0.0
    statuses: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    while pending:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} of {len(ids)} runs unfinished after {timeout:.0f}s")
        time.sleep(poll)
        pipe = r.pipeline(transaction=False)
        for rid in pending:
            pipe.hmget(Keys().run(rid), "status", "updated_at")
        still = []
        for rid, (status, updated) in zip(pending, pipe.execute(), strict=True):
            if status in TERMINAL:
                last = max(last, float(updated))
                statuses[status.decode()] = statuses.get(status.decode(), 0) + 1
            else:
                still.append(rid)
        pending = still
    return {"last_updated": last, "statuses": statuses}


def throughput(d: Dispatcher, r: redis.Redis, sc: Scenario, n: int, timeout: float) -> dict[str, Any]:
    """Submit ``n`` runs as fast as one thread can and wait for all: runs per second from
    the first submit to the last run's final commit."""
    t0 = time.time()
    ids = submit_many(d, sc, n)
    submit_s = time.time() - t0
    out = wait_all(r, ids, timeout)
    makespan = out["last_updated"] - t0
    return {"runs": n, "makespan_s": makespan, "runs_per_s": n / makespan,
            "submit_s": submit_s, "statuses": out["statuses"]}


def handle(d: Dispatcher, run_id: str) -> RunHandle:
    return RunHandle(d, run_id, created=False)
