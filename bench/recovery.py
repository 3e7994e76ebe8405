"""P0: crash recovery as a figure — kill -9 the worker running a step, time the resume.

Two workers; a run is started, and once its step is under way (mid-LLM-call, or mid-tool)
the worker holding it is found (``celery inspect active``) and killed with SIGKILL. The
figure is the time from the kill until the other worker restarted the interrupted work:
the next new event's stream time minus the work it had to redo (the scripted LLM's fixed
``delay``, or the ``sleep`` tool's fixed duration), so it is the detection + resend cost.
Stream ids carry the Redis server's clock (same host as this process).
"""

from __future__ import annotations

import os
import signal
import statistics
import time
from typing import Any

from bench.cluster import Cluster, Worker, WorkerSpec
from bench.report import Figure
from bench.script import Scenario
from reactq.dispatcher.client import Dispatcher
from reactq.shared.settings import Settings

SPEC = WorkerSpec(count=2, pool="threads", concurrency=4, env={"REACTQ_DEMO_TOOLS": "true"})
WORK_S = 3.0  # the LLM delay / tool duration redone after the kill


def _event_times(d: Dispatcher, run_id: str) -> list[tuple[float, dict[str, Any], str]]:
    return [(int(sid.split("-")[0]) / 1000.0, e.data, e.channel)
            for sid, e in d.store.read_events(run_id, count=10_000)]


def _wait_event(d: Dispatcher, run_id: str, pred: Any, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for t, data, channel in _event_times(d, run_id):
            if pred(channel, data):
                return t
        time.sleep(0.02)
    raise TimeoutError(f"run {run_id}: event not seen within {timeout}s")


def _holder(cl: Cluster, d: Dispatcher, run_id: str, task: str, timeout: float = 10.0) -> Worker:
    """The worker running this run's ``task`` (``reactq.iterate`` or ``reactq.tool``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        active = d.celery.control.inspect(timeout=1.0).active() or {}
        for node, tasks in active.items():
            if any(t.get("name") == task and run_id in str(t.get("args")) for t in tasks):
                name = node.split("@")[0]
                return next(w for w in cl.workers if w.name == name)
    raise TimeoutError(f"no worker runs {run_id}")


def _one(cl: Cluster, d: Dispatcher, where: str) -> float:
    if where == "llm":
        sc = Scenario(turns=2, tool="echo", delay=WORK_S, tag=os.urandom(3).hex())
        started = lambda ch, e: ch == "step" and e.get("type") == "thinking" and e.get("status") == "start"  # noqa: E731
        resumed = lambda ch, e: ch == "step" and e.get("type") == "thinking" and e.get("status") == "done"  # noqa: E731
    else:
        sc = Scenario(turns=2, tool="sleep", sleep=WORK_S, tag=os.urandom(3).hex())
        started = lambda ch, e: ch == "step" and e.get("type") == "iteration" and e.get("status") == "start"  # noqa: E731
        resumed = lambda ch, e: ch == "step" and e.get("type") == "iteration" and e.get("status") == "done"  # noqa: E731
    handle = d.submit({"query": sc.query(), "completion_check": False})
    started_at = _wait_event(d, handle.run_id, started, 30)
    victim = _holder(cl, d, handle.run_id, "reactq.iterate" if where == "llm" else "reactq.tool")
    killed_at = time.time()
    if killed_at - started_at > WORK_S - 0.3:
        raise RuntimeError(f"found the holder too late ({killed_at - started_at:.2f}s into a {WORK_S}s step)")
    os.killpg(victim.proc.pid, signal.SIGKILL)
    victim.proc.wait()
    done_at = _wait_event(d, handle.run_id, resumed, 60)
    result = handle.result(timeout=60)
    assert result["status"] == "succeeded", result
    cl.workers.remove(victim)
    return done_at - WORK_S - killed_at


def p0(cl: Cluster, samples: int = 5) -> list[Figure]:
    """P0-llm and P0-tool: kill → resumed on another worker, median of ``samples`` kills."""
    lease_s = Settings().lease_seconds
    figures = []
    for where in ("llm", "tool"):
        times = []
        for _ in range(samples):
            cl.start_workers(SPEC)
            d = Dispatcher(cl.settings())
            times.append(_one(cl, d, where))
        cl.stop_workers()
        figures.append(Figure(
            f"P0-{where}", f"kill -9 of the worker mid-{'LLM call' if where == 'llm' else 'tool'} "
            "→ the step restarted on the other worker (median)", statistics.median(times), "s",
            target=5.0, rule="value<=", repeats=samples,
            details={"samples_s": [round(t, 3) for t in times], "max_s": round(max(times), 3),
                     "lease_seconds": lease_s, "workers": SPEC.describe()}))
    return figures
