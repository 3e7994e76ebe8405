"""Celery tasks: thin wiring around ``reactq.workers.drive``. Payloads carry ids, never histories.

| task              | queue         | args                         | does                           |
|-------------------|---------------|------------------------------|--------------------------------|
| ``reactq.iterate``| reactq.runs   | run_id, step_no (None=resume)| tool selection, one LLM turn, or the fan-in after tools |
| ``reactq.tool``   | reactq.tools  | run_id, step_no, call_id, tool name | one tool call (hooks + tool)   |
| ``reactq.answer`` | reactq.runs   | run_id, step_no              | the streamed synthesis, `done` |

Each holds a lease while it runs (``workers/lease.py``); what each commit makes due is
recorded durably in the same commit, and the watchdog started with the worker resends
what is due and not taken up (``workers/due.py``). A task that takes a lease over from a
holder that died counts that crash, and ends the work instead once it crashed too often.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from celery import signals

from reactq.shared.errors import RunNotFound
from reactq.workers import drive, faults
from reactq.workers.app import app
from reactq.workers.due import Crashes, DueWatchdog
from reactq.workers.runtime import Runtime, runtime

log = logging.getLogger(__name__)


def send(task: str, args: list[Any], queue: str) -> None:
    """Enqueue by name; Flower shows the run id and step, nothing else."""
    app.send_task(task, args=args, queue=queue, argsrepr=repr(args), kwargsrepr="{}")


@app.task(name="reactq.iterate", ignore_result=True)
def iterate(run_id: str, step_no: int | None = None) -> None:
    rt = runtime()
    faults.point("before_lease", "reactq.iterate")
    with rt.leases.hold(f"run:{run_id}", "reactq.iterate", [run_id, None], drive.RUNS) as held:
        if held and not _run_crashed_too_often(rt, run_id):
            faults.point("in_lease", "reactq.iterate", run_id)
            drive.iterate(rt, run_id, step_no, send)


@app.task(name="reactq.answer", ignore_result=True)
def answer(run_id: str, step_no: int | None = None) -> None:
    rt = runtime()
    faults.point("before_lease", "reactq.answer")
    with rt.leases.hold(f"run:{run_id}", "reactq.answer", [run_id, None], drive.RUNS) as held:
        if held and not _run_crashed_too_often(rt, run_id):
            drive.answer(rt, run_id, step_no, send)


def _run_crashed_too_often(rt: Runtime, run_id: str) -> bool:
    """Taking over from a holder that died counts a crash; at the limit the run ends."""
    if not rt.leases.took_over():
        return False
    try:
        rec = rt.store.load(run_id)
    except RunNotFound:
        return False
    crashes = Crashes(rt).run(run_id, rec.step_no, True)
    if crashes < rt.settings.max_task_crashes or rec.status in ("succeeded", "failed", "cancelled"):
        return False
    drive.end_crashed_run(rt, run_id, crashes, send)
    return True


@app.task(name="reactq.tool", ignore_result=True)
def tool(run_id: str, step_no: int, call_id: str, tool_name: str | None = None) -> None:
    """``tool_name`` is only there so that Flower shows which tool a task runs."""
    rt = runtime()
    member = f"tool:{run_id}:{call_id}"
    spec = [run_id, step_no, call_id, tool_name]
    faults.point("before_lease", "reactq.tool")
    with rt.leases.hold(member, "reactq.tool", spec, drive.TOOLS) as held:
        if held and not _tool_crashed_too_often(rt, run_id, step_no, call_id):
            drive.tool(rt, run_id, step_no, call_id, send)


def _tool_crashed_too_often(rt: Runtime, run_id: str, step_no: int, call_id: str) -> bool:
    if not rt.leases.took_over():
        return False
    turn = rt.store.get_turn(run_id)
    call = drive.turn_call(turn, call_id)
    if turn is None or call is None or turn["step_no"] != step_no:
        return False
    crashes = Crashes(rt).tool(run_id, call_id, step_no, True)
    if crashes < rt.settings.max_task_crashes:
        return False
    drive.end_crashed_tool(rt, run_id, step_no, call, crashes, send)
    return True


_watchdog: DueWatchdog | None = None


def publish_catalog() -> None:
    """Tell the door which tools and models the workers have (``reactq:catalog``), so a
    gateway validates requests without importing tool code. The last worker to start wins."""
    rt = runtime()
    tools = [t.openai_schema()["function"] for t in rt.tools]
    models = [m.model_dump(mode="json") for m in rt.models.specs()]
    rt.redis.hset(rt.keys.catalog, mapping={"tools": json.dumps(tools), "models": json.dumps(models)})


@signals.worker_ready.connect
def _start_watchdog(**_: Any) -> None:
    global _watchdog
    publish_catalog()
    if _watchdog is None:
        _watchdog = DueWatchdog(runtime(), send)
        _watchdog.start()


@signals.worker_shutdown.connect
def _stop_watchdog(**_: Any) -> None:
    if _watchdog is not None:
        _watchdog.stopped.set()
