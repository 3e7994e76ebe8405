"""A worker never answers for a tool it does not have.

Workers of one cluster may offer different tools: during a rolling deploy that adds a tool, or
when two were started with different ``REACTQ_TOOLS``. Each worker that consumes
``reactq.tools`` also consumes a queue of its own (``reactq.tools.@<node name>``) and
announces its tools with that queue (``reactq.shared.stores.toolsets``), on start and every
few seconds while it lives; it withdraws them when it stops.

A tool task whose tool this worker lacks is looked at before anything is claimed:

* some live worker offers the tool: the task is handed on to that worker's queue, unchanged;
* no worker ever offered the name: the model made it up; it is answered here as always
  ("Unknown tool …"), as is a tool the run may not use;
* otherwise (its workers are being replaced) the call waits for one: it is looked at again
  every second, on whichever worker takes it, for up to ``REACTQ_TOOL_UNAVAILABLE_S``, then
  answered with an error observation and an ``error`` event of kind ``tool_unavailable``
  naming the tool and ``REACTQ_TOOLS``.

The model is shown every tool of the run whichever worker makes the LLM call: a worker keeps
stand-ins (``reactq.shared.tools.remote``) for the tools only other live workers offer, built
from the schemas they announced. A step whose run names a tool that no worker has announced
yet waits for one the same way (``tools_shown``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import redis
from celery import signals

from reactq.shared.engine.result import run_tool_names
from reactq.shared.engine.state import TERMINAL_STATUSES, ToolOutcome
from reactq.shared.stores.run_hash import RunRecord
from reactq.shared.stores.due import tool_member
from reactq.shared.stores.toolsets import LIVE_S, ToolSets
from reactq.shared.tools.remote import remote_tool
from reactq.shared.wire import ITERATE, RUNS_QUEUE, TOOL, TOOLS_QUEUE, handon_queue
from reactq.workers.runs.listeners import Send
from reactq.workers.runtime import Runtime, runtime

log = logging.getLogger(__name__)

#: How often a waiting call is looked at again.
LOOK_EVERY_S = 1.0
#: How often a worker renews its announcement (well within ``LIVE_S``).
ANNOUNCE_EVERY_S = LIVE_S / 4

#: ``send_to(task, args, queue, countdown)``: the Celery send with an explicit queue and delay.
SendTo = Callable[[str, list[Any], str, float], None]


def unavailable_text(tool: str, waited: float) -> str:
    return (f"Tool '{tool}' could not run: no worker that offers it is running (waited {waited:.0f} s). "
            f"Start a worker whose REACTQ_TOOLS loads it.")


def handed_on(rt: Runtime, run_id: str, step_no: int, call_id: str, tool: str | None,
              send: Send, send_to: SendTo) -> bool:
    """True when this worker does not run the call: it lacks the tool, and handed the call on,
    let it wait, or answered that it could not run. False: run it here as always."""
    if tool is None or tool in rt.tools:
        return False
    sets = ToolSets(rt.redis, rt.keys)
    args = [run_id, step_no, call_id, tool]
    queue = sets.queue_for(tool, exclude=_node)
    if queue is not None:
        log.info("run %s: tool %s is not here; call %s handed on to %s", run_id, tool, call_id, queue)
        send_to(TOOL, args, queue, 0.0)
        return True
    if not sets.ever_offered(tool):
        return False  # a made-up name: "Unknown tool", at once
    turn = rt.store.get_turn(run_id)
    if not turn or turn["step_no"] != step_no:
        return True  # the turn is over: a late duplicate
    if tool not in turn.get("tool_names", []):
        return False  # not one of the run's tools: answered as always
    limit = rt.settings.tool_unavailable_s
    waited, looks = sets.wait(run_id, call_id, LOOK_EVERY_S, ttl=limit + 60)
    if waited >= limit:
        give_up(rt, run_id, step_no, call_id, tool, waited, send)
        sets.done_waiting(run_id, call_id)
    elif looks:
        send_to(TOOL, args, TOOLS_QUEUE, LOOK_EVERY_S)
    return True


def tools_shown(rt: Runtime, rec: RunRecord, step_no: int | None, send_to: SendTo) -> bool:
    """Can a step of ``rec`` show the model every tool the run may use? True: run it here.
    Else a tool the run asked for by name was never announced by any worker (a script
    started its worker and submitted at once): the step is looked at again every second, for
    up to ``REACTQ_TOOL_UNAVAILABLE_S``, then runs with the tools there are."""
    wanted = run_tool_names(rec.state) if rec.state is not None else rec.request.get("tools")
    if not wanted or rec.cancel or rec.status in TERMINAL_STATUSES:
        return True
    shown = set(rt.run_tools.names())
    if set(wanted) <= shown:
        return True
    sets = ToolSets(rt.redis, rt.keys)
    # A tool some worker ever offered is shown from its schema (its calls wait for a worker,
    # then answer tool_unavailable); only a tool no worker has announced yet is waited for.
    missing = sorted(set(wanted) - shown)
    rt.run_tools.add_missing(remote_tool(e) for e in sets.schemas(missing))
    missing = sorted(set(wanted) - set(rt.run_tools.names()))
    if not missing:
        return True
    limit = rt.settings.tool_unavailable_s
    waited, looks = sets.wait(rec.run_id, f"step:{rec.step_no}", LOOK_EVERY_S, ttl=limit + 60)
    if waited >= limit:
        log.warning("run %s: no live worker offers %s (REACTQ_TOOLS); the step goes on without them",
                    rec.run_id, ", ".join(missing))
        return True
    if looks:
        log.info("run %s: waiting for a worker offering %s", rec.run_id, ", ".join(missing))
        send_to(ITERATE, [rec.run_id, step_no], RUNS_QUEUE, LOOK_EVERY_S)
    return False


def give_up(rt: Runtime, run_id: str, step_no: int, call_id: str, tool: str, waited: float,
            send: Send) -> None:
    """Answer the call with the ``tool_unavailable`` error observation and count it in."""
    spec = [run_id, step_no, call_id, tool]
    with rt.leases.hold_only(tool_member(run_id, call_id), TOOL, spec, TOOLS_QUEUE, wait=0) as held:
        if not held:
            return
        turn = rt.store.get_turn(run_id)
        if not turn or turn["step_no"] != step_no:
            return
        record = rt.store.ledger_get(run_id, call_id)
        if record is None or record["status"] != "done":
            log.warning("run %s: no live worker offers tool %s; call %s answered unavailable", run_id, tool, call_id)
            outcome = ToolOutcome(tool_call_id=call_id, tool_name=tool, error=unavailable_text(tool, waited),
                                  unavailable=True, worker=rt.worker_name)
            rt.store.ledger_done(run_id, call_id, outcome, step_no)
        n = len(turn["calls"])
        if rt.store.fanin(run_id, step_no, call_id, n) >= n:
            send(ITERATE, [run_id, step_no], RUNS_QUEUE)


# -- announcing this worker's tools ---------------------------------------------------------------

_node: str | None = None
_queue: str | None = None
_stop = threading.Event()


def _consume_handon_queue(sender: Any = None, instance: Any = None, **_: Any) -> None:
    """A worker that takes tool calls also takes the ones handed on to it by name."""
    global _node, _queue
    queues = instance.app.amqp.queues
    if TOOLS_QUEUE not in queues.consume_from:
        return
    _node, _queue = str(sender), handon_queue(str(sender))
    queues.select_add(_queue)


def announce() -> None:
    """Renew this worker's announcement (when it takes tool calls), and show runs the tools
    only other live workers offer."""
    rt = runtime()
    sets = ToolSets(rt.redis, rt.keys)
    if _node is not None and _queue is not None:
        sets.announce(_node, rt.tools.names(), _queue)
    add_stand_ins(rt, sets)


def add_stand_ins(rt: Runtime, sets: ToolSets) -> None:
    missing = sets.live_names() - set(rt.run_tools.names())
    if missing:
        rt.run_tools.add_missing(remote_tool(e) for e in sets.schemas(sorted(missing)))


def _announcing() -> None:
    while not _stop.wait(ANNOUNCE_EVERY_S):
        try:
            announce()
        except (redis.RedisError, OSError) as exc:
            log.warning("could not announce this worker's tools: %s", exc)


def _start() -> None:
    try:
        announce()
    except (redis.RedisError, OSError) as exc:
        log.warning("could not announce this worker's tools: %s", exc)
    threading.Thread(target=_announcing, name="reactq-toolsets", daemon=True).start()


def _start_announcing(**_: Any) -> None:
    _start()


def _start_in_child(**_: Any) -> None:
    """A prefork child runs steps with its own runtime: it keeps its own stand-ins (it does
    not announce: its parent does)."""
    global _node
    _node = None
    _start()


def _withdraw(**_: Any) -> None:
    _stop.set()
    if _node is None:
        return
    try:
        rt = runtime()
        ToolSets(rt.redis, rt.keys).retire(_node)
    except (redis.RedisError, OSError):
        pass  # it stops being counted as live after LIVE_S


signals.celeryd_after_setup.connect(_consume_handon_queue, weak=False)
signals.worker_ready.connect(_start_announcing, weak=False)
signals.worker_process_init.connect(_start_in_child, weak=False)
signals.worker_shutdown.connect(_withdraw, weak=False)
