"""The worker's side of approvals: a tool task that claimed a call asks for a person's
decision instead of running it (and holds nothing while it waits), runs it once it was
approved, and the watchdog applies ``on_timeout`` to an approval that expired.

Which call waits: its tool's ``requires_approval`` or the run's ``approval`` policy (known
before anything runs), or a PreToolUse hook answering ``ask`` (known once the hooks ran; the
call has not run). An approved call runs with the approved arguments, hooks included.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from reactq.shared.observe import otel
from reactq.shared.engine import approval as A
from reactq.shared.engine import prompts, recorded
from reactq.shared.engine.callevents import done_data, start_data
from reactq.shared.engine.state import ToolOutcome
from reactq.shared.engine.toolexec import execute_call
from reactq.shared.errors import ApprovalConflict, RunNotFound
from reactq.shared.models import ToolCallRequest
from reactq.shared.stores.approvals import Decided
from reactq.shared.stores.roundtrip import Op
from reactq.shared.wire import ITERATE, RUNS_QUEUE
from reactq.workers import webhooks
from reactq.workers.runs.listeners import Send
from reactq.workers.runtime import Runtime

log = logging.getLogger(__name__)

#: ``run_call`` returns this when the call now waits for a person (nothing to close).
WAITS = None


def approved_of(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``approved`` ledger record behind a call's record (None: not decided to run)."""
    if record is None:
        return None
    if record.get("status") == "approved":
        return record
    inner = record.get("approved")
    return inner if isinstance(inner, dict) else None


def run_call(rt: Runtime, run_id: str, call: ToolCallRequest, turn: dict[str, Any],
             record: dict[str, Any] | None, token: str, calls: int) -> ToolOutcome | None:
    """Run a claimed call (``record``: its ledger record before this task, None when fresh),
    unless it must wait for a person: then request the approval and return ``WAITS``."""
    view = (turn.get("recorded") or {}).get(call.id, {})
    answered = recorded.carried_out(view, call, now=time.time(), worker=rt.worker_name)
    if answered is not None:  # reused from, or refused by, a recorded ledger: nothing runs
        return answered
    registry = rt.tools.filtered(turn["tool_names"])
    approved = approved_of(record)
    tool = registry.get(call.name) if call.name in registry else None
    if approved is None:
        reason = view.get("reason") or A.wait_reason(call.name, bool(tool and tool.requires_approval),
                                                     turn.get("approval"))
        if reason is not None:
            # Such a call never runs unapproved: a claim left by a delivery that died ran
            # nothing, and this task takes it over ("" = any claim without an approval). A
            # wait the recorded ledger asks for (a call that may have run) follows the
            # operator's terms, as one the tool demands does.
            return request(rt, run_id, call, turn, reason, token if record is None else "", calls,
                           added_by_run=not view.get("reason"))
    if record is not None and record.get("status") == "pending" and tool is not None and not tool.idempotent:
        # An earlier delivery started this call and died: its effect is unknown, and a
        # non-idempotent tool must not silently run twice.
        return ToolOutcome(tool_call_id=call.id, tool_name=call.name, error=prompts.UNCERTAIN_OBSERVATION,
                           uncertain=True, worker=rt.worker_name,
                           approval=approved.get("approval") if approved else None)
    run = call if approved is None else call.model_copy(update={"arguments": json.loads(approved["args"])})

    async def started() -> None:  # a held call that did not wait: its start once its hooks passed
        if approved is None and call.id in turn.get("held", ()):
            rt.approvals.announce(run_id, int(turn["step_no"]), call.id, start_data(int(turn["iteration"]), call))

    with otel.tool_span(call.name, call.id, run_id) as span:
        outcome = rt.run(execute_call(run, registry=registry, hooks=rt.hooks, run_id=run_id,
                                      metadata=turn.get("metadata") or {}, worker=rt.worker_name,
                                      approved=approved is not None, on_start=started))
        otel.tool_outcome(span, outcome.error, outcome.blocked, outcome.uncertain)
    if outcome.ask is not None:
        return request(rt, run_id, call, turn, outcome.ask, token, calls)
    if approved is not None:
        outcome.approval = approved.get("approval")
        if approved.get("edited"):
            outcome.approved_args = dict(run.arguments)
    return outcome


def announce_done(rt: Runtime, run_id: str, call: ToolCallRequest, turn: dict[str, Any],
                  outcome: ToolOutcome) -> list[Op]:
    """In a turn with held calls, a call's ``iteration done`` goes out as it completes, in the
    write of its close, just before the close counts it in (``callevents``): the fan-in, which
    starts from ``pub_seq``, comes after it and does not publish it again. Not published
    (the turn over, the run stopping, the call done elsewhere) only where that no longer matters."""
    if not turn.get("held"):
        return []
    outcome.announced = True
    data = done_data(int(turn["iteration"]), call, outcome, float(turn["tools_started_at"]), time.time())
    return [rt.approvals.announce_op(run_id, int(turn["step_no"]), call.id, data)]


def request(rt: Runtime, run_id: str, call: ToolCallRequest, turn: dict[str, Any], reason: str,
            token: str, calls: int, *, added_by_run: bool = False) -> ToolOutcome | None:
    """Ask for a person's decision on ``call`` (this task's claim). The call is answered as
    cancelled instead when the run is asked to stop. ``added_by_run``: the wait comes from the
    run's ``approval`` field (its terms apply; else the operator's, ``approval.terms``)."""
    tool = rt.tools.get(call.name) if call.name in rt.tools else None
    timeout_s, on_timeout = A.terms(
        tool_flag=bool(tool and tool.requires_approval), added_by_run=added_by_run,
        policy=turn.get("approval"), operator_timeout_s=rt.settings.approval_timeout_s,
        tool_on_timeout=tool.approval_on_timeout if tool else "reject")
    record = A.request_record(run_id=run_id, call_id=call.id, tool_name=call.name,
                              tool_args=dict(call.arguments), reason=reason, requested_at=time.time(),
                              timeout_s=timeout_s, on_timeout=on_timeout,
                              tenant=str(turn.get("tenant") or "default"))
    got = rt.approvals.request(record, token=token, step_no=int(turn["step_no"]), calls=calls)
    if got.code == -1:
        return ToolOutcome(tool_call_id=call.id, tool_name=call.name, error=prompts.CANCELLED_OBSERVATION,
                           worker=rt.worker_name)
    if got.code == 1:
        log.info("run %s: call %s (%s) waits for approval %s", run_id, call.id, call.name, record["approval_id"])
        if got.old != got.new:
            rt.store.move_status(run_id, got.new, got.created_at)
        webhooks.approval_requested(rt, run_id, record)
    return WAITS


def settle(rt: Runtime, decided: Decided) -> None:
    """After a decision: the run's row in the run index."""
    if decided.new and decided.old != decided.new:
        rt.store.move_status(decided.record["run_id"], decided.new, decided.created_at)


def expire(rt: Runtime, run_id: str, call_id: str, send: Send) -> bool:
    """The watchdog found an approval's member due: apply ``on_timeout`` if it expired.
    True when the member is done with (decided, gone, or the run ended)."""
    approval_id = A.approval_id(run_id, call_id)
    record = rt.approvals.get(run_id, approval_id)
    if record is None or record.get("status") != "pending":
        return True
    if record["expires_at"] > time.time() + 0.001:
        return False  # not yet (the member was moved early): the watchdog looks again
    try:
        decided = rt.approvals.decide(run_id, approval_id, "expire", digest=None, by="timeout")
    except RunNotFound:
        return True
    except ApprovalConflict:
        # The run is stopping: let its step end it (it cancels the approval).
        send_nudge(rt, run_id, send)
        return False
    settle(rt, decided)
    for task, args, queue in decided.sends:
        send(task, args, queue)
    return True


def send_nudge(rt: Runtime, run_id: str, send: Send) -> None:
    try:
        step_no = rt.store.load(run_id).step_no
    except RunNotFound:
        return
    send(ITERATE, [run_id, step_no], RUNS_QUEUE)
