"""Celery tasks: thin wiring around ``reactq.workers.runs.drive`` (a run's steps) and
``reactq.workers.runs.toolcall`` (tool calls). Payloads carry ids, never histories.

| task              | queue         | args                         | does                           |
|-------------------|---------------|------------------------------|--------------------------------|
| ``reactq.iterate``| reactq.runs   | run_id, step_no (None=resume)| tool selection, one LLM turn, or the fan-in after tools |
| ``reactq.tool``   | reactq.tools  | run_id, step_no, call_id, tool name | one tool call (hooks + tool)   |
| ``reactq.answer`` | reactq.runs   | run_id, step_no              | the streamed synthesis, `done` |
| ``reactq.webhook``| reactq.webhooks | webhook_id                 | one delivery attempt (``workers/webhooks.py``) |

Each holds a lease while it runs (``workers/recovery/lease.py``); the watchdog started with the
worker resends a task whose worker died. The task's first read (a run's load, a tool call's
open) goes in the lease's round trip, and writes deferred during the task (metrics, the flow
limiter's settle) ride on its later ones (``riding``; ``reactq.shared.stores.roundtrip``).
"""

from __future__ import annotations

import json
import logging
import sys
import uuid
from collections.abc import Callable
from typing import Any

import redis
from celery import signals

from reactq.shared.errors import ConfigError
from reactq.shared.redisconn import check_cluster_mode
from reactq.shared.stores.flow import seen_pauses
from reactq.shared.stores.roundtrip import Read, riding
from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.stores.due import run_member, tool_member
from reactq.shared.stores.run_hash import RunRecord
from reactq.shared.stores.toolsets import ToolSets
from reactq.shared.wire import ANSWER, ITERATE, RUNS_QUEUE, TOOL, TOOLS_QUEUE, WEBHOOK
from reactq.workers import faults, webhooks
from reactq.workers.runs import drive, flow, handon, toolcall
from reactq.workers.dags import recover as dags_recover
from reactq.workers.runs import recover as runs_recover
from reactq.workers.runs.listeners import Send
from reactq.workers.app import app
from reactq.workers.recovery.backlog import Backlog, broker_depth
from reactq.workers.recovery.watchdog import Crashes, DueWatchdog, Handler
from reactq.workers.runtime import Runtime, runtime
from reactq.workers.recovery.sweeper import Sweeper

log = logging.getLogger(__name__)


#: The queues this process has sent to once, declaring them (Celery's default).
_declared: set[str] = set()


def send(task: str, args: list[Any], queue: str) -> None:
    """Enqueue by name; Flower shows the run id and step, nothing else. A batch run's steps
    carry its lower priority (``workers/runs/flow.py``).

    The first send to a queue declares it, as Celery does by default; later ones do not
    (``declare=[]``): the declaration is in the broker from then on (and every worker that
    consumes the queue declares it again when it connects), and kombu, although it caches it,
    copies and binds the queue anew on every publish (≈ 40 % of a send's CPU)."""
    options: dict[str, Any] = {} if queue not in _declared else {"declare": []}
    priority = flow.message_priority()
    if priority:
        options["priority"] = priority
    app.send_task(task, args=args, queue=queue, argsrepr=repr(args), kwargsrepr="{}", **options)
    _declared.add(queue)


def send_to(task: str, args: list[Any], queue: str, countdown: float) -> None:
    """``send`` to a queue of its own choosing, after ``countdown`` seconds (a hand-on)."""
    options: dict[str, Any] = {"countdown": countdown} if countdown > 0 else {}
    app.send_task(task, args=args, queue=queue, argsrepr=repr(args), kwargsrepr="{}", **options)


def _resume_step(task: Any, step_no: int | None) -> int | None:
    """A redelivered step resumes whatever is current (None), as the watchdog's resend does.

    RabbitMQ redelivers a dead holder's message at once. Steps run back to back in one task,
    so the holder may have committed that message's step and died in a later one: taken
    literally, the message is stale, the new holder would return and release the lease —
    and with it the dead holder's resend record — and the run would never resume. The lease
    we hold guarantees that no other step of the run is in progress."""
    info = getattr(task.request, "delivery_info", None) or {}
    return None if info.get("redelivered") else step_no


@app.task(name=ITERATE, ignore_result=True, bind=True)
def iterate(self: Any, run_id: str, step_no: int | None = None) -> None:
    _run_step(self, ITERATE, run_id, step_no, _iterate_with_its_tools)


def _iterate_with_its_tools(rt: Runtime, rec: RunRecord, step_no: int | None, send: Send) -> None:
    """A step whose tools no live worker offers yet waits for one (``workers/runs/handon.py``)."""
    if handon.tools_shown(rt, rec, step_no, send_to):
        drive.iterate(rt, rec, step_no, send)


@app.task(name=ANSWER, ignore_result=True, bind=True)
def answer(self: Any, run_id: str, step_no: int | None = None) -> None:
    _run_step(self, ANSWER, run_id, step_no, drive.answer)


def _run_step(task: Any, name: str, run_id: str, step_no: int | None,
              step: Callable[[Runtime, RunRecord, int | None, Send], None]) -> None:
    """A run's step task (``iterate`` / ``answer``): holds the run's lease while ``step`` runs.
    The lease's resend spec is always ``name`` resuming whatever is current."""
    step_no = _resume_step(task, step_no)
    flow.set_message_priority(None)  # threads run many tasks: drive sets the run's own
    rt = runtime()
    faults.point("before_lease", name)
    with seen_pauses() as seen:
        load = flow.with_pause(rt, rt.store.load_step(run_id), seen)
        _hold_and_step(rt, name, run_id, step_no, step, load)


def _hold_and_step(rt: Runtime, name: str, run_id: str, step_no: int | None,
                   step: Callable[[Runtime, RunRecord, int | None, Send], None], load: Read[RunRecord]) -> None:
    with rt.leases.hold(run_member(run_id), name, [run_id, None], RUNS_QUEUE, read=lambda _: load) as held, \
            riding(rt.redis):
        if held:
            rec = held.value()
            if not _run_crashed_too_often(rt, run_id, rec):
                faults.point("in_lease", name, run_id)
                step(rt, rec or load.run(rt.redis), step_no, send)


def _run_crashed_too_often(rt: Runtime, run_id: str, rec: RunRecord | None) -> bool:
    """Taking over from a holder that died counts a crash; at the limit the run ends."""
    if not rt.leases.took_over() or rec is None:
        return False
    crashes = Crashes(rt).run(run_id, rec.step_no, True)
    if crashes < rt.settings.max_task_crashes or rec.status in TERMINAL_STATUSES:
        return False
    drive.end_crashed_run(rt, run_id, crashes, send)
    return True


@app.task(name=TOOL, ignore_result=True)
def tool(run_id: str, step_no: int, call_id: str, tool_name: str | None = None) -> None:
    """``tool_name`` is only there so that Flower shows which tool a task runs."""
    flow.set_message_priority(None)
    rt = runtime()
    if handon.handed_on(rt, run_id, step_no, call_id, tool_name, send, send_to):
        return  # this worker lacks the tool (workers/runs/handon.py)
    member = tool_member(run_id, call_id)
    spec = [run_id, step_no, call_id, tool_name]
    faults.point("before_lease", TOOL)
    token = uuid.uuid4().hex

    def opening(lease: tuple[str, str] | None) -> Any:
        return rt.calls.open(run_id, step_no, call_id, token, lease)

    with rt.leases.hold(member, TOOL, spec, TOOLS_QUEUE, read=opening) as held, riding(rt.redis):
        if held and not _tool_crashed_too_often(rt, run_id, step_no, call_id):
            toolcall.tool(rt, run_id, step_no, call_id, send, held.value())


def _tool_crashed_too_often(rt: Runtime, run_id: str, step_no: int, call_id: str) -> bool:
    if not rt.leases.took_over():
        return False
    turn = rt.store.get_turn(run_id)
    call = toolcall.turn_call(turn, call_id)
    if turn is None or call is None or turn["step_no"] != step_no:
        return False
    crashes = Crashes(rt).tool(run_id, call_id, step_no, True)
    if crashes < rt.settings.max_task_crashes:
        return False
    toolcall.end_crashed_tool(rt, run_id, step_no, call, crashes, send)
    return True


@app.task(name=WEBHOOK, ignore_result=True)
def webhook(webhook_id: str) -> None:
    """One delivery attempt of a webhook message (``workers/webhooks.py``)."""
    webhooks.deliver(runtime(), webhook_id)


_watchdog: DueWatchdog | None = None


def publish_catalog() -> None:
    """Tell the door which tools and models the workers have (``reactq:catalog``), so a
    gateway validates requests without importing tool code. The last worker to start wins."""
    rt = runtime()
    tools = [_catalog_entry(t) for t in rt.tools]
    models = [m.model_dump(mode="json") for m in rt.models.specs()]
    rt.redis.hset(rt.keys.catalog, mapping={"tools": json.dumps(tools), "models": json.dumps(models)})
    ToolSets(rt.redis, rt.keys).offer(tools)  # every tool offered, by name (workers/runs/handon.py)


def _catalog_entry(t: Any) -> dict[str, Any]:
    """A tool as ``GET /v1/tools`` lists it: its function schema plus its flags."""
    entry = {**t.openai_schema()["function"], "idempotent": t.idempotent}
    if t.metadata.get("mcp_server"):
        entry["mcp_server"] = t.metadata["mcp_server"]
    return entry


@signals.worker_init.connect
def _refuse_a_cluster_node(**_: Any) -> None:
    """A Redis Cluster node without ``REACTQ_REDIS_CLUSTER=true`` stops the worker at start,
    naming the setting (rather than failing every step later on ``MOVED``)."""
    rt = runtime()
    try:
        check_cluster_mode(rt.redis, rt.settings)
    except ConfigError as exc:
        log.critical("%s", exc)
        raise SystemExit(f"reactq worker: {exc}") from None  # not an Exception: ends the start
    except (redis.RedisError, OSError):
        pass  # Redis not there yet: the worker waits for it like for the broker


def recoverers() -> dict[str, Handler]:
    """The due watchdog's handler for each kind of work this worker drives."""
    return {**runs_recover.HANDLERS, **dags_recover.HANDLERS, **webhooks.HANDLERS}


@signals.worker_ready.connect
def _start_watchdog(**_: Any) -> None:
    global _watchdog
    publish_catalog()
    if _watchdog is None:
        # One view of the queues for both: neither resends what still waits in a backlog.
        backlog = Backlog(broker_depth(app))
        _watchdog = DueWatchdog(runtime(), send, recoverers(), backlog=backlog)
        _watchdog.start()
        rt = runtime()
        Sweeper(rt.store, send, rt.settings.stall_seconds, backlog=backlog).start()


@signals.worker_ready.connect
def _prewarm_tool_runners(sender: Any = None, **_: Any) -> None:
    """Start a tool-runner before the first tool call needs one (it costs a Python start).
    Under prefork the pool children do this themselves (``worker_process_init``)."""
    if "prefork" not in type(getattr(sender, "pool", None)).__module__:
        from reactq.shared.tools.isolation import pool

        pool().prewarm(1)


@signals.worker_process_init.connect
def _prewarm_tool_runners_in_child(**_: Any) -> None:
    from reactq.shared.tools.isolation import pool

    pool().prewarm(1)


def close_hub() -> None:
    """Close this process's MCP sessions, if it opened any: the hub's module (and the MCP SDK)
    is loaded only where ``REACTQ_MCP`` is set, and is not loaded at shutdown just to find none."""
    hub = sys.modules.get("reactq.shared.tools.mcp.hub")
    if hub is not None:
        hub.close_hub()


def flush_metrics() -> None:
    """Write the counters this process has summed (``workers/metrics.py``), if it has any."""
    recorder = vars(runtime()).get("recorder")
    if recorder is not None:
        recorder.sums.flush()


@signals.worker_shutdown.connect
def _stop_watchdog(**_: Any) -> None:
    if _watchdog is not None:
        _watchdog.stopped.set()
    close_hub()
    flush_metrics()


@signals.worker_process_shutdown.connect
def _close_mcp_sessions(**_: Any) -> None:
    """A prefork child closes its own MCP sessions (stdio servers stop with it) and writes
    its summed counters."""
    close_hub()
    flush_metrics()
