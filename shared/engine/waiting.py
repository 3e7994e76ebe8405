"""Approvals in one process (the in-process shell): a call that must wait asks the run's
``approver`` (``EngineDeps.approver``, an async callback given the approval record) and
goes on with its decision. Without an approver, or when it does not answer within the
approval's ``timeout_s``, the approval expires and ``on_timeout`` applies.

The events are those of the Celery shell (``callevents``): ``approval {status:
"requested"}``, then ``approval {status: <decided>}``, then for a call that runs its
``iteration start``; every call of such a turn publishes its ``iteration done`` as it
completes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from reactq.shared.engine import approval as A
from reactq.shared.engine.callevents import done_data, start_data
from reactq.shared.engine.deps import Approver, EngineDeps, StepIO
from reactq.shared.engine.loop import emit
from reactq.shared.engine.state import RunState, ToolOutcome
from reactq.shared.engine.toolexec import execute_call
from reactq.shared.models import ToolCallRequest


def may_wait(state: RunState, deps: EngineDeps, call: ToolCallRequest) -> bool:
    """Whether ``call`` may wait for a person: its tool or the run's policy says it waits, or
    a PreToolUse hook that may ``ask`` runs for its tool (``Hook.may_ask``)."""
    registry = deps.run_registry(state)
    flag = call.name in registry and registry.get(call.name).requires_approval
    return A.wait_reason(call.name, flag, state.approval) is not None or deps.hooks.may_ask(call.name)


async def run_held(state: RunState, deps: EngineDeps, call: ToolCallRequest, io: StepIO, *,
                   worker: str | None = None, reason: str | None = None) -> ToolOutcome:
    """A call of a turn with held calls: run it (after a person's decision when it must wait)
    and publish its ``iteration done`` as soon as it is known. ``reason``: a wait the recorded
    ledger asks for (the call may have run in the run it was recorded in), on the operator's
    terms as a wait the tool demands."""
    registry = deps.run_registry(state)
    tool = registry.get(call.name) if call.name in registry else None
    added_by_run = False
    if reason is None:
        reason = A.wait_reason(call.name, bool(tool and tool.requires_approval), state.approval)
        added_by_run = reason is not None
    if reason is None:
        async def started() -> None:
            if call.id in state.held_calls:
                await io.publish([emit(state, "step", **start_data(state.iteration, call))])

        out = await execute_call(call, registry=registry, hooks=deps.hooks, run_id=state.run_id,
                                 metadata=state.metadata, clock=deps.clock, worker=worker, on_start=started)
        if out.ask is not None:
            out = await decide_and_run(state, deps, call, out.ask, io, added_by_run=False)
    else:
        out = await decide_and_run(state, deps, call, reason, io, added_by_run=added_by_run)
    await io.publish([emit(state, "step", **done_data(state.iteration, call, out, state.tools_started_at,
                                                      deps.clock()))])
    out.announced = True
    return out


async def decide_and_run(state: RunState, deps: EngineDeps, call: ToolCallRequest, reason: str,
                         io: StepIO, *, added_by_run: bool) -> ToolOutcome:
    """Request the approval of ``call``, wait for the decision, then run or answer the call."""
    registry = deps.run_registry(state)
    tool = registry.get(call.name) if call.name in registry else None
    timeout_s, on_timeout = A.terms(tool_flag=bool(tool and tool.requires_approval), added_by_run=added_by_run,
                                    policy=state.approval, operator_timeout_s=deps.approval_timeout_s,
                                    tool_on_timeout=tool.approval_on_timeout if tool else "reject")
    rec = A.request_record(run_id=state.run_id, call_id=call.id, tool_name=call.name,
                           tool_args=dict(call.arguments), reason=reason, requested_at=deps.clock(),
                           timeout_s=timeout_s, on_timeout=on_timeout, tenant=state.tenant)
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
    await io.publish([emit(state, "step", **start_data(state.iteration, call,
                                                       approved_args=decided.get("approved_args")))])
    out = await execute_call(call.model_copy(update={"arguments": args}), registry=registry,
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
