"""Redis restarted (with its AOF) mid-run, then the broker restarted mid-run.

Phase ``redis``: one server is store and broker (the default deployment); it is stopped with
runs in flight, kept down ``FAULTS_OUTAGE_SECONDS`` (60), started again from its AOF.
Phase ``broker``: the broker is a server of its own; it goes away while the store stays.
Figures per phase: runs, succeeded, lost (not finished 180 s after the restart), workers that
exited, seconds from the restart until the last run finished, event streams with a gap or
a duplicate.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import redis

from bench.cluster import Cluster, WorkerSpec
from bench.faults.common import BASE_ENV, AofRedis, use_aof_redis
from bench.script import Scenario
from reactq.dispatcher.client import Dispatcher
from reactq.shared.redisconn import free_port
from reactq.shared.requests import RunRequest

OUTAGE = float(os.environ.get("FAULTS_OUTAGE_SECONDS", "60"))
RUNS = int(os.environ.get("FAULTS_OUTAGE_RUNS", "12"))
FINISH_WITHIN = 180.0
#: The stall sweeper resends a run unchanged (and unheld) this long: shorter than the
#: default 60 s so that the suite stays bounded.
STALL = float(os.environ.get("FAULTS_STALL_SECONDS", "15"))


def _wait(h: Any, deadline: float) -> str:
    """The run's final status, or ``lost`` at ``deadline`` (Redis errors just after the
    restart are retried: the client's pooled connections died with the server)."""
    while time.monotonic() < deadline:
        try:
            return str(h.result(timeout=max(0.5, deadline - time.monotonic()))["status"])
        except TimeoutError:
            break
        except redis.RedisError:
            time.sleep(0.5)
    return "lost"


def _phase(cl: Cluster, store: AofRedis, down: str) -> dict[str, Any]:
    broker = AofRedis(free_port(), cl.tmp / f"broker-{down}")
    broker.start()
    env = {**BASE_ENV, "REACTQ_STALL_SECONDS": str(STALL),
           **({"REACTQ_BROKER_URL": broker.url} if down == "broker" else {})}
    # The cluster pings its workers through the broker they listen on.
    cl.settings = functools.partial(Cluster.settings, cl, broker_url=env.get("REACTQ_BROKER_URL"))  # type: ignore[method-assign]
    try:
        for attempt in range(3):  # a ping reply lost to a connection reset is not a figure
            try:
                cl.start_workers(WorkerSpec(count=2, concurrency=4, env=env))
                break
            except redis.RedisError:
                if attempt == 2:
                    raise
                time.sleep(1)
        d = Dispatcher(cl.settings())
        sc = Scenario(turns=3, calls=1, tool="echo", delay=1.0, tag=down)
        handles = [d.submit(RunRequest(query=f"{sc.query()} n={n} phase={down}")) for n in range(RUNS)]
        time.sleep(1.5)  # every run is in flight
        target = broker if down == "broker" else store
        target.stop()
        time.sleep(OUTAGE)
        exited_during = sum(w.proc.poll() is not None for w in cl.workers)
        target.start()
        restarted = time.monotonic()
        statuses, gaps, last = [], 0, restarted
        for h in handles:
            status = _wait(h, restarted + FINISH_WITHIN)
            statuses.append(status)
            if status != "lost":
                last = time.monotonic()
                seqs = [e.seq for _, e in h.events(timeout=10)]
                gaps += seqs != list(range(1, len(seqs) + 1))
        return {"runs": RUNS, "succeeded": statuses.count("succeeded"), "lost": statuses.count("lost"),
                "workers_exited": exited_during + sum(w.proc.poll() is not None for w in cl.workers),
                "outage_s": OUTAGE, "finished_after_restart_s": round(last - restarted, 1),
                "event_streams_with_gaps": gaps}
    finally:
        cl.stop_workers()
        broker.stop()
        del cl.settings  # back to the class's method


def run() -> dict[str, Any]:
    with Cluster() as cl:
        store = use_aof_redis(cl)
        try:
            return {"redis": _phase(cl, store, "redis"), "broker": _phase(cl, store, "broker")}
        finally:
            store.stop()  # the restarted server is not the one the cluster started
