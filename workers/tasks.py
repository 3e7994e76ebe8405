"""Celery tasks: thin wiring around ``reactq.workers.drive``. Payloads carry ids, never histories.

| task              | queue         | args                         | does                           |
|-------------------|---------------|------------------------------|--------------------------------|
| ``reactq.iterate``| reactq.runs   | run_id, step_no (None=resume)| tool selection, one LLM turn, or the fan-in after tools |
| ``reactq.tool``   | reactq.tools  | run_id, step_no, call_id, tool name | one tool call (hooks + tool)   |
| ``reactq.answer`` | reactq.runs   | run_id, step_no              | the streamed synthesis, `done` |

Each holds a lease while it runs (``workers/lease.py``); the watchdog started with the
worker resends a task whose worker died.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from celery import signals

from reactq.workers import drive, flow
from reactq.workers.app import app
from reactq.workers.lease import Watchdog
from reactq.workers.runtime import runtime

log = logging.getLogger(__name__)


def send(task: str, args: list[Any], queue: str) -> None:
    """Enqueue by name; Flower shows the run id and step, nothing else. A batch run's steps
    carry its lower priority (``workers/flow.py``)."""
    options: dict[str, Any] = {}
    priority = flow.message_priority()
    if priority:
        options["priority"] = priority
    app.send_task(task, args=args, queue=queue, argsrepr=repr(args), kwargsrepr="{}", **options)


@app.task(name="reactq.iterate", ignore_result=True)
def iterate(run_id: str, step_no: int | None = None) -> None:
    flow.set_message_priority(None)  # threads run many tasks: drive sets the run's own
    rt = runtime()
    with rt.leases.hold(f"run:{run_id}", "reactq.iterate", [run_id, None], drive.RUNS) as held:
        if held:
            drive.iterate(rt, run_id, step_no, send)


@app.task(name="reactq.answer", ignore_result=True)
def answer(run_id: str, step_no: int | None = None) -> None:
    flow.set_message_priority(None)  # threads run many tasks: drive sets the run's own
    rt = runtime()
    with rt.leases.hold(f"run:{run_id}", "reactq.answer", [run_id, None], drive.RUNS) as held:
        if held:
            drive.answer(rt, run_id, step_no, send)


@app.task(name="reactq.tool", ignore_result=True)
def tool(run_id: str, step_no: int, call_id: str, tool_name: str | None = None) -> None:
    """``tool_name`` is only there so that Flower shows which tool a task runs."""
    flow.set_message_priority(None)
    rt = runtime()
    member = f"tool:{run_id}:{call_id}"
    spec = [run_id, step_no, call_id, tool_name]
    with rt.leases.hold(member, "reactq.tool", spec, drive.TOOLS) as held:
        if held:
            drive.tool(rt, run_id, step_no, call_id, send)


_watchdog: Watchdog | None = None


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
        _watchdog = Watchdog(runtime().leases, send)
        _watchdog.start()


@signals.worker_shutdown.connect
def _stop_watchdog(**_: Any) -> None:
    if _watchdog is not None:
        _watchdog.stopped.set()
