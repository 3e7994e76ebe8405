"""Approvals in one process (the in-process shell): a call that must wait asks the run's
``approver`` (``EngineDeps.approver``, an async callback given the approval record) and
goes on with its decision. Without an approver, or when it does not answer within the
approval's ``timeout_s``, the approval expires and ``on_timeout`` applies.

The events are those of the Celery shell: ``approval {status: "requested"}``, then
``approval {status: <decided>}``, then the call's usual ``iteration done``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from reactq.shared.engine import approval as A
from reactq.shared.engine.deps import Approver, EngineDeps, StepIO
from reactq.shared.engine.loop import emit
from reactq.shared.engine.state import RunState, ToolOutcome
from reactq.shared.engine.toolexec import execute_call
from reactq.shared.models import ToolCallRequest


async def decide_and_run(state: RunState, deps: EngineDeps, call: ToolCallRequest, reason: str,
                         io: StepIO) -> ToolOutcome:
    """Request the approval of ``call``, wait for the decision, then run or answer the call."""
    policy = state.approval or {}
    on_timeout = str(policy.get("on_timeout") or "reject")
    rec = A.request_record(run_id=state.run_id, call_id=call.id, tool_name=call.name,
                           tool_args=dict(call.arguments), reason=reason, requested_at=deps.clock(),
                           timeout_s=int(policy.get("timeout_s") or A.DEFAULT_TIMEOUT_S), on_timeout=on_timeout)
    await io.publish([emit(state, "approval", **A.requested_event(rec))])
    answer = await _ask(deps.approver, rec)
    kind = str(answer.get("decision"))
    message = answer.get("message")
    status = "expired" if kind == "expire" else A.DECIDED[kind]
    decided = A.decided_record(rec, status, decided_at=deps.clock(), by=answer.get("by"),
                               args=answer.get("args") if kind == "edit" else None, message=message)
    await io.publish([emit(state, "approval", **A.decided_event(decided))])
    if A.effect(kind, on_timeout) == "answer":
        return A.answer_outcome(rec, kind, message, deps.clock())
    args = decided.get("approved_args", call.arguments)
    out = await execute_call(call.model_copy(update={"arguments": args}), registry=deps.run_registry(state),
                             hooks=deps.hooks, run_id=state.run_id, metadata=state.metadata, clock=deps.clock,
                             approved=True)
    out.approval = status
    if "approved_args" in decided:
        out.approved_args = dict(args)
    return out


async def _ask(approver: Approver | None, rec: dict[str, Any]) -> dict[str, Any]:
    if approver is None:
        return {"decision": "expire", "by": "timeout"}
    try:
        answer = await asyncio.wait_for(approver(dict(rec)), rec["timeout_s"])
    except asyncio.TimeoutError:
        return {"decision": "expire", "by": "timeout"}
    if answer.get("decision") not in A.DECIDED:
        raise ValueError(f"approver answered {answer.get('decision')!r}: one of {', '.join(A.DECIDED)}")
    if answer["decision"] == "edit" and not isinstance(answer.get("args"), dict):
        raise ValueError("approver: an edit needs args (an object)")
    return answer
