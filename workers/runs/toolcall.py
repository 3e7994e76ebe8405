"""The tool task's side: run one call of a turn exactly once (unless its ledger has it, or
it waits for a person: ``workers/runs/approvals.py``), count it in, and send the fan-in when
it is the turn's last; and the crash limit's answer for a call whose worker died too often.

Two round trips of its own (``reactq.shared.stores.calls``): the call's open (turn, ledger record,
claim) with the lease, and its close (outcome, fan-in, due records, the tool's metrics) with
the lease's release.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from reactq.shared import transport
from reactq.shared.stores.due import tool_member
from reactq.shared.stores.calls import OpenedCall
from reactq.shared.engine.state import ToolOutcome
from reactq.shared.models import ToolCallRequest
from reactq.shared.stores.roundtrip import take
from reactq.workers import metrics
from reactq.workers.runs import drive
from reactq.shared.wire import ITERATE, TOOL
from reactq.workers.runs import approvals
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
    status = record.get("status") if record else None
    if status == "waiting":
        return  # a person decides; the decision makes the call due again
    outcome = None
    first: list[Any] = []
    if status != "done":
        outcome = approvals.run_call(rt, run_id, call, turn, record, opened.token, len(calls))
        if outcome is approvals.WAITS:
            return  # it waits for a person, holding nothing (the lease goes as the task ends)
        first = approvals.announce_done(rt, run_id, call, turn, outcome)
    # Whatever follows the close is a send, covered by the due record the close writes: the
    # lease goes with it.
    release = rt.leases.handoff()
    carried = _fan_in_carried(rt, run_id, step_no, send) if len(calls) == 1 else None
    won, counted = rt.calls.close(run_id, step_no, call_id, outcome, len(calls),
                                  ops=metrics.record_tool(rt.recorder, outcome) if outcome else [],
                                  then=([release] if release is not None else []) + take(), first=first,
                                  push=carried[0] if carried else None)
    if outcome is not None and not won:  # another worker finished it while this one was cut off
        log.warning("tool call %s of run %s was already done elsewhere; result dropped", call_id, run_id)
    elif outcome is not None:
        rt.recorder.sums.add(metrics.tool_observations(rt.recorder, outcome))
    if counted >= len(calls) and carried is None:
        send(ITERATE, [run_id, step_no], RUNS)


def _fan_in_carried(rt: Runtime, run_id: str, step_no: int, send: Send) -> list[tuple[str, str]] | None:
    """The fan-in's broker message, built for the close to push itself (``step.carried``), for a
    turn of one call, whose close is sure to complete it. None: sent after the close (another
    broker, a cluster; a turn of several calls, whose last call to close sends it)."""
    if not rt.sends_in_commit:
        return None
    with transport.captured() as pushes:
        send(ITERATE, [run_id, step_no], RUNS)
    return pushes


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
