"""The benchmark workers' Celery app: ``celery -A bench.celeryapp worker``.

It is reactq's own app (``reactq.workers.app``, same configuration, same tasks) plus the floor
tasks the figures are compared with, so that floor and reactq run on the very same worker
processes, queues, pool and settings:

* ``bench.hop(key, remaining)``: a chain of trivial tasks. Each hop enqueues the next,
  alternating ``reactq.runs`` and ``reactq.tools`` exactly as a reactq turn does
  (iterate → tool → iterate); the last one ``LPUSH``es its finish time to ``key``.
* ``bench.noop(key)``: a trivial task that counts itself (``INCR key``).

With ``BENCH_PUBTIMES=1`` in its environment, a worker also records when it publishes
each event of a run whose id starts with ``p5`` (``HSET bench:pub:{run_id} seq time``,
written after the publish so the event itself is not delayed): that is how P5 measures
"published by a worker → received by a client" across processes.

``BENCH_EXPERIMENTS`` (comma-separated) applies patches to reactq's code: see ``bench.experiments``.
``BENCH_RTT_DIR`` counts the worker's Redis round trips into that folder (``bench.rtt``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import redis
from celery import signals

import reactq.workers.runs.tasks  # noqa: F401  (registers reactq's tasks and worker signals)
from bench import experiments
from reactq.shared.redisconn import redis_url
from reactq.shared.settings import Settings
from reactq.shared.stores.runs import RunStore
from reactq.workers.app import app

_redis: redis.Redis | None = None

if os.environ.get("BENCH_TASK_EVENTS") in ("on", "off"):  # what Celery's task events cost (bench.budget)
    events = os.environ["BENCH_TASK_EVENTS"] == "on"
    app.conf.update(worker_send_task_events=events, task_send_sent_event=events)


def _r() -> redis.Redis:
    global _redis
    if _redis is None:
        _redis = redis.Redis.from_url(redis_url(Settings()))
    return _redis


@app.task(name="bench.hop", ignore_result=True)
def hop(key: str, remaining: int) -> None:
    if remaining > 1:
        queue = "reactq.tools" if remaining % 2 == 0 else "reactq.runs"
        args = [key, remaining - 1]
        app.send_task("bench.hop", args=args, queue=queue, argsrepr=repr(args), kwargsrepr="{}")
    else:
        _r().lpush(key, f"{time.time():.6f}")


@app.task(name="bench.noop", ignore_result=True)
def noop(key: str) -> None:
    _r().incr(key)


def _instrument_publish_times() -> None:
    """Wrap the store's two publishing calls to record, per event, when it was published."""
    original_publish, original_commit = RunStore.publish, RunStore.commit

    def record(run_id: str, events: list[Any], at: float) -> None:
        if events and run_id.startswith("p5"):
            _r().hset(f"bench:pub:{run_id}", mapping={e.seq: f"{at:.6f}" for e in events})

    def publish(self: RunStore, run_id: str, events: list[Any]) -> int:
        at = time.time()
        out = original_publish(self, run_id, events)
        record(run_id, events, at)
        return out

    def commit(self: RunStore, run_id: str, state: Any, expected_step_no: int, events: list[Any],
               **kwargs: Any) -> bool:
        at = time.time()
        out = original_commit(self, run_id, state, expected_step_no, events, **kwargs)
        if out:
            record(run_id, events, at)
        return out

    RunStore.publish = publish  # type: ignore[method-assign]
    RunStore.commit = commit  # type: ignore[method-assign]


if os.environ.get("BENCH_PUBTIMES") == "1":
    _instrument_publish_times()

if os.environ.get("BENCH_RTT_DIR"):
    from bench import rtt_probe

    rtt_probe.install(os.environ["BENCH_RTT_DIR"])

_task_cpu: dict[str, float] = {}
_task_started = threading.local()


def _dump_task_cpu(folder: str) -> None:
    while True:
        time.sleep(0.2)
        path = os.path.join(folder, f"{os.getpid()}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(dict(_task_cpu), f)
        os.replace(path + ".tmp", path)


if os.environ.get("BENCH_TASK_CPU_DIR"):
    # CPU time of each task's own thread (threads pool), by task name: what a step costs,
    # unblurred by other processes on a loaded machine (bench.budget).
    @signals.task_prerun.connect
    def _cpu_start(**_: Any) -> None:
        _task_started.at = time.thread_time()

    @signals.task_postrun.connect
    def _cpu_stop(task: Any = None, **_: Any) -> None:
        name = getattr(task, "name", "?")
        _task_cpu[name] = _task_cpu.get(name, 0.0) + time.thread_time() - getattr(_task_started, "at", 0.0)

    threading.Thread(target=_dump_task_cpu, args=(os.environ["BENCH_TASK_CPU_DIR"],), daemon=True).start()

experiments.apply()  # BENCH_EXPERIMENTS: patches to try on the workers (off by default)
