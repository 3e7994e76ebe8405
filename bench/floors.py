"""The floors: the same work done by plain Celery tasks / plain Redis, in the same run."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import redis

from bench.cluster import ROOT
from reactq.dispatcher.client import Dispatcher


def chain_ms(d: Dispatcher, r: redis.Redis, hops: int) -> float:
    """Wall time of a chain of ``hops`` trivial tasks, each enqueuing the next (bench.hop)."""
    key = f"bench:hop:{uuid.uuid4().hex}"
    t0 = time.perf_counter()
    d.send("bench.hop", [key, hops])
    if r.blpop([key], 60) is None:
        raise TimeoutError(f"a {hops}-hop chain did not finish within 60 s")
    return (time.perf_counter() - t0) * 1000


def noop_tasks_per_s(d: Dispatcher, r: redis.Redis, n: int, timeout: float = 120) -> dict[str, float]:
    """Send ``n`` trivial tasks as fast as one thread can; tasks/s until the last one ran."""
    key = f"bench:noop:{uuid.uuid4().hex}"
    t0 = time.perf_counter()
    for _ in range(n):
        d.send("bench.noop", [key])
    sent = time.perf_counter() - t0
    deadline = time.monotonic() + timeout
    while int(r.get(key) or 0) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{n} trivial tasks did not finish within {timeout}s")
        time.sleep(0.005)
    elapsed = time.perf_counter() - t0
    return {"tasks": n, "elapsed_s": elapsed, "tasks_per_s": n / elapsed, "send_s": sent}


def xadd_xread_ms(redis_url: str, n: int, interval: float = 0.005) -> list[float]:
    """Delivery times of ``n`` entries XADDed by another process and read here (XREAD BLOCK)."""
    r = redis.Redis.from_url(redis_url)
    key = f"bench:xadd:{uuid.uuid4().hex}"
    proc = subprocess.Popen([sys.executable, "-m", "bench.xadd", redis_url, key, str(n), str(interval)],
                            cwd=ROOT)
    out: list[float] = []
    last = "0-0"
    try:
        while len(out) < n:
            res = r.xread({key: last}, block=5000, count=100)
            now = time.time()
            if not res:
                raise TimeoutError("the XADD publisher stopped sending")
            for entry_id, fields in res[0][1]:
                last = entry_id
                out.append((now - float(fields[b"t"])) * 1000)
    finally:
        proc.wait(30)
        r.delete(key)
    return out
