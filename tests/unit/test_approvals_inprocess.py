"""Approvals in the in-process shell: the run asks its ``approver`` and goes on with the
decision; the events are the Celery shell's (requested, decided, then the iteration)."""

from __future__ import annotations

import asyncio
from typing import Any

from reactq.shared.engine.approval import args_digest
from reactq.shared.inprocess import run_local
from reactq.shared.llm.testing import ScriptedLLM, text, tool_calls
from reactq.shared.events import ListSink
from reactq.shared.requests import RunRequest
from reactq.shared.tools.base import tool
from tests.unit.engine_kit import make_deps

ran: list[int] = []


@tool("pay", requires_approval=True, isolate=False)
def pay(amount: int) -> str:
    """Pays."""
    ran.append(amount)
    return f"paid {amount}"


@tool("pay", requires_approval=True, approval_on_timeout="approve", isolate=False)
def lenient_pay(amount: int) -> str:
    """Pays (may go ahead when nobody decides)."""
    ran.append(amount)
    return f"paid {amount}"


@tool("pay", isolate=False)
def free_pay(amount: int) -> str:
    """Pays (no approval of its own)."""
    ran.append(amount)
    return f"paid {amount}"


def _run(approver: Any, tool: Any = pay, **request: Any) -> tuple[Any, ListSink, ScriptedLLM]:
    llm = ScriptedLLM([tool_calls(("c1", "pay", {"amount": 5})), text("ok"), text("synth")],
                      abilities={"tool_call": True})
    sink = ListSink()
    state = asyncio.run(run_local(RunRequest(query="pay 5", completion_check=False, **request),
                                  make_deps(llm, [tool]), sink=sink, approver=approver))
    return state, sink, llm


def test_an_edit_runs_with_the_approved_arguments() -> None:
    seen: list[dict[str, Any]] = []

    async def approver(rec: dict[str, Any]) -> dict[str, Any]:
        seen.append(rec)
        return {"decision": "edit", "args": {"amount": 3}, "by": "ana"}

    ran.clear()
    state, sink, _ = _run(approver)
    assert state.status == "succeeded" and ran == [3]
    assert seen[0]["args_digest"] == args_digest({"amount": 5})
    approvals = [e.data for e in sink.events if e.channel == "approval"]
    assert [a["status"] for a in approvals] == ["requested", "edited"]
    done = [e.data for e in sink.events if e.data.get("type") == "iteration" and e.data["status"] == "done"]
    assert done[0]["tool_args"] == {"amount": 5} and done[0]["approved_args"] == {"amount": 3}
    start = [e.data for e in sink.events if e.data.get("type") == "iteration" and e.data["status"] == "start"]
    assert start[0]["approved_args"] == {"amount": 3}
    assert approvals[0]["seq"] < approvals[1]["seq"] < start[0]["seq"] < done[0]["seq"]
    assert approvals[1]["seq"] == approvals[0]["seq"] + 1 and start[0]["seq"] == approvals[1]["seq"] + 1
    assert [e.seq for e in sink.events] == list(range(1, len(sink.events) + 1))


def test_without_an_approver_the_approval_expires_with_on_timeout() -> None:
    ran.clear()
    state, sink, llm = _run(None)
    assert state.status == "succeeded" and ran == []
    assert [e.data["status"] for e in sink.events if e.channel == "approval"] == ["requested", "expired"]
    tool_msg = next(m for m in llm.calls[1].messages if m.role == "tool")
    assert "nobody decided" in str(tool_msg.content)
    # A wait the tool demands follows the operator's terms: the run's field cannot make it
    # expire into approve; the tool itself may.
    ran.clear()
    state, _, _ = _run(None, approval={"on_timeout": "approve", "timeout_s": 1})
    assert ran == []
    state, _, _ = _run(None, tool=lenient_pay)
    assert ran == [5]
    # A wait the run's field adds takes the field's terms.
    ran.clear()
    state, _, _ = _run(None, tool=free_pay, approval={"tools": ["pay"], "on_timeout": "approve"})
    assert ran == [5]
