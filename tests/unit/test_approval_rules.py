"""Approvals as pure logic: which call waits, the digest a decision is bound to, the
request's validation, and what the model is told."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from mcp.types import ToolAnnotations
from pydantic import ValidationError

import reactq
from reactq.shared.engine import approval as A
from reactq.shared.errors import RequestError
from reactq.shared.hooks import Hook, HookContext, HookPoint, HookRegistry, HookResult
from reactq.shared.requests import RunRequest, check_run_request
from reactq.shared.tools.mcp.tools import approval_from


def test_the_digest_is_sha256_of_canonical_json() -> None:
    args = {"b": [1, 2], "a": "é"}
    canonical = '{"a":"é","b":[1,2]}'.encode()
    assert A.args_digest(args) == hashlib.sha256(canonical).hexdigest()
    assert A.args_digest({"a": "é", "b": [1, 2]}) == A.args_digest(args)
    assert A.args_digest({"a": 1}) != A.args_digest({"a": 2})


def test_which_calls_wait() -> None:
    assert A.wait_reason("pay", True, None) == "tool 'pay' requires approval"
    assert A.wait_reason("echo", False, None) is None
    assert "policy" in (A.wait_reason("echo", False, {"tools": ["echo"]}) or "")
    assert A.wait_reason("add", False, {"tools": ["echo"]}) is None
    assert A.wait_reason("add", False, {"tools": "all"}) is not None


def test_the_decorator_and_tool_carry_requires_approval() -> None:
    @reactq.tool("pay", requires_approval=True)
    def pay(amount: int) -> str:
        return str(amount)

    assert pay.requires_approval is True
    assert reactq.tool("free")(lambda: "x").requires_approval is False


def test_mcp_servers_say_which_tools_wait() -> None:
    read_only = ToolAnnotations(readOnlyHint=True)
    assert approval_from("always", read_only) is True
    assert approval_from("never", None) is False
    assert approval_from("writes", read_only) is False
    assert approval_from("writes", None) is True
    assert approval_from("writes", ToolAnnotations(readOnlyHint=False)) is True


def test_the_run_policy_is_checked_at_the_door() -> None:
    req = RunRequest(query="q", approval={"tools": ["echo"], "timeout_s": 60, "on_timeout": "approve"})
    assert req.approval is not None and req.approval.timeout_s == 60
    for bad in ({"timeout_s": 0}, {"timeout_s": 2_592_001}, {"on_timeout": "maybe"}, {"tool": "x"}):
        with pytest.raises(ValidationError):
            RunRequest(query="q", approval=bad)
    with pytest.raises(RequestError, match="approval.tools"):
        check_run_request(RunRequest(query="q", approval={"tools": ["nope"]}), tools=["echo"], models=[])


def test_a_pre_tool_hook_can_ask() -> None:
    async def ask(ctx: HookContext) -> HookResult:
        return HookResult(ask=True, reason="big amount")

    async def later(ctx: HookContext) -> HookResult:
        return HookResult(ask=True, reason="second")

    reg = HookRegistry([Hook("ask", HookPoint.PRE_TOOL_USE, ask), Hook("later", HookPoint.PRE_TOOL_USE, later, priority=1)])
    res = asyncio.run(reg.run_pre_tool(HookContext(HookPoint.PRE_TOOL_USE, tool_name="pay", tool_args={})))
    assert res.allow and res.ask and res.reason == "big amount"


def test_a_rejection_reads_unlike_a_cancel_or_an_interruption() -> None:
    from reactq.shared.engine import prompts

    rec = A.request_record(run_id="r", call_id="c", tool_name="pay", tool_args={}, reason="x",
                           requested_at=0.0, timeout_s=10, on_timeout="reject", tenant="default")
    rejected = A.answer_outcome(rec, "reject", "too much", 1.0)
    assert "did not approve" in rejected.observation and "too much" in rejected.observation
    assert rejected.observation not in (prompts.INTERRUPTED_OBSERVATION, prompts.CANCELLED_OBSERVATION)
    assert A.answer_outcome(rec, "respond", "done by hand", 1.0).observation == "done by hand"
    assert A.answer_outcome(rec, "expire", None, 1.0).approval == "expired"
    assert A.effect("expire", "approve") == "run" and A.effect("expire", "reject") == "answer"


def test_a_dag_step_whose_child_waits_shows_waiting() -> None:
    from reactq.dispatcher.approvals import with_waiting

    class Store:
        def fields_of(self, run_ids: list[str], *names: str) -> list[list[str | None]]:
            return [["waiting" if rid == "r1" else "running"] for rid in run_ids]

    view = {"status": "running", "steps": [{"id": "a", "status": "running", "run_id": "r1"},
                                           {"id": "b", "status": "completed", "run_id": "r0"}]}
    out = with_waiting(Store(), view)
    assert [s["status"] for s in out["steps"]] == ["waiting", "completed"] and out["status"] == "waiting"
    both = {"status": "running", "steps": [{"id": "a", "status": "running", "run_id": "r1"},
                                           {"id": "c", "status": "running", "run_id": "r2"}]}
    assert with_waiting(Store(), both)["status"] == "running"
