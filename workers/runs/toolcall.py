"""The tool task's side: run one call of a turn exactly once (unless its ledger has it),
count it in, and send the fan-in when it is the turn's last; and the crash limit's answer
for a call whose worker died too often.

Two round trips of its own (``reactq.shared.stores.calls``): the call's open (turn, ledger record,
claim) with the lease, and its close (outcome, fan-in, due records, the tool's metrics) with
the lease's release.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from reactq.shared import otel
from reactq.shared.stores.due import tool_member
from reactq.shared.stores.calls import OpenedCall
from reactq.shared.engine import prompts
from reactq.shared.engine.state import ToolOutcome
from reactq.shared.engine.toolexec import execute_call
from reactq.shared.models import ToolCallRequest
from reactq.shared.stores.roundtrip import take
from reactq.workers import metrics
from reactq.workers.runs import drive
from reactq.shared.wire import ITERATE, TOOL
from reactq.workers.runs.drive import RUNS, TOOLS
from reactq.workers.runs.listeners import Send
from reactq.workers.runtime import Runtime

log = logging.getLogger(__name__)


def tool(rt: Runtime, run_id: str, step_no: int, call_id: str, send: Send,
         opened: OpenedCall | None = None) -> None:
    """Run one tool call of a turn (unless the ledger has it), then count it in. ``opened``:
    the call's open (``CallLedger.open``), when the lease's round trip brought it."""
    if opened is None:
        opened = rt.calls.open(run_id, step_no, call_id, uuid.uuid4().hex).run(rt.redis)
    turn = opened.turn
    if not turn or turn["step_no"] != step_no:
        return  # the turn is over: a late duplicate
    calls = [ToolCallRequest.model_validate(c) for c in turn["calls"]]
    call = next((c for c in calls if c.id == call_id), None)
    if call is None:
        return
    record = opened.record
    outcome = None
    if record is None or record["status"] != "done":
        outcome = _execute_once(rt, run_id, call, turn, record)
    # Whatever follows the close is a send, covered by the due record the close writes: the
    # lease goes with it.
    release = rt.leases.handoff()
    won, counted = rt.calls.close(run_id, step_no, call_id, outcome, len(calls),
                                  ops=metrics.record_tool(rt.recorder, outcome) if outcome else [],
                                  then=([release] if release is not None else []) + take())
    if outcome is not None and not won:  # another worker finished it while this one was cut off
        log.warning("tool call %s of run %s was already done elsewhere; result dropped", call_id, run_id)
    if counted >= len(calls):
        send(ITERATE, [run_id, step_no], RUNS)


def _execute_once(rt: Runtime, run_id: str, call: ToolCallRequest, turn: dict[str, Any],
                  record: dict[str, Any] | None) -> ToolOutcome:
    """Run the call; ``record`` is its ledger record from before this task (None: the open
    claimed it for this task)."""
    registry = rt.tools.filtered(turn["tool_names"])
    if record is not None and call.name in registry and not registry.get(call.name).idempotent:
        # An earlier delivery started this call and died: its effect is unknown, and a
        # non-idempotent tool must not silently run twice.
        return ToolOutcome(tool_call_id=call.id, tool_name=call.name, error=prompts.UNCERTAIN_OBSERVATION,
                           uncertain=True, worker=rt.worker_name)
    with otel.tool_span(call.name, call.id, run_id) as span:
        outcome = rt.run(execute_call(call, registry=registry, hooks=rt.hooks, run_id=run_id,
                                      metadata=turn.get("metadata") or {}, worker=rt.worker_name))
        otel.tool_outcome(span, outcome.error, outcome.blocked, outcome.uncertain)
    return outcome


def turn_call(turn: dict[str, Any] | None, call_id: str) -> ToolCallRequest | None:
    for c in (turn or {}).get("calls", []):
        if c.get("id") == call_id:
            return ToolCallRequest.model_validate(c)
    return None


def give_up_tool(rt: Runtime, run_id: str, step_no: int, call: ToolCallRequest, crashes: int,
                 send: Send) -> None:
    """Answer the call with an error observation (``tool_crashed``) and count it in."""
    spec = [run_id, step_no, call.id, call.name]
    with rt.leases.hold_only(tool_member(run_id, call.id), TOOL, spec, TOOLS, wait=0) as held:
        if held:
            end_crashed_tool(rt, run_id, step_no, call, crashes, send)


def end_crashed_tool(rt: Runtime, run_id: str, step_no: int, call: ToolCallRequest, crashes: int,
                     send: Send) -> None:
    """``give_up_tool`` for a caller that holds the call's lease."""
    turn = rt.store.get_turn(run_id)
    if not turn or turn["step_no"] != step_no:
        return
    record = rt.store.ledger_get(run_id, call.id)
    if record is None or record["status"] != "done":
        text = drive.crash_text(f"Tool '{call.name}'", crashes, rt)
        outcome = ToolOutcome(tool_call_id=call.id, tool_name=call.name, error=text, crashed=True,
                              worker=rt.worker_name)
        rt.store.ledger_done(run_id, call.id, outcome, step_no)
    n = len(turn["calls"])
    if rt.store.fanin(run_id, step_no, call.id, n) >= n:
        send(ITERATE, [run_id, step_no], RUNS)
