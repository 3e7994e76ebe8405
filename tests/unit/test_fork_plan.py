"""A fork as pure logic over its parent (``engine/fork.py``), run in-process: which turn it
starts at, its plan, the history it keeps, its edits and its guardrails."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reactq.shared.engine.fork import ForkEdit, fork_turn, history_before, make_plan, seed_state
from reactq.shared.engine.recorded import Recorded, ReplayPolicy, recorded_calls, run_calls
from reactq.shared.engine.state import RunState
from reactq.shared.errors import ForkConflict, RequestError
from reactq.shared.events import ListSink
from reactq.shared.hooks import Hook, HookContext, HookPoint, HookResult
from reactq.shared.inprocess import run_local
from reactq.shared.llm.testing import RaiseReply, ScriptedLLM, final, text, tool_calls, tool_json
from reactq.shared.requests import RunRequest
from reactq.shared.tools.base import tool
from tests.unit.engine_kit import make_deps

ran: list[str] = []


@tool("note", idempotent=False, isolate=False)
def note(text: str) -> str:
    """Writes a note (not idempotent)."""
    ran.append(text)
    return f"noted {text}"


def _parent(native: bool = True) -> RunState:
    """Turn 1 notes a, turn 2 notes b, turn 3's LLM call fails."""
    if native:
        replies: list[Any] = [tool_calls(("c1", "note", {"text": "a"})), tool_calls(("c2", "note", {"text": "b"})),
                              RaiseReply("outage")]
    else:
        replies = [tool_json("note", {"text": "a"}), tool_json("note", {"text": "b"}), RaiseReply("outage")]
    llm = ScriptedLLM(replies, abilities={"tool_call": native})
    ran.clear()
    state = asyncio.run(run_local(RunRequest(query="take notes", completion_check=False), make_deps(llm, [note])))
    assert state.status == "failed" and state.iteration == 3
    return state


def _ledger(state: RunState) -> dict[str, dict[str, Any]]:
    return {s.tool_call_id: {"status": "done", "outcome": {"tool_call_id": s.tool_call_id, "tool_name": s.tool_name,
                                                           "observation": s.observation}}
            for s in state.steps if s.tool_call_id}


def _seed(parent: RunState, turn: int, edit: ForkEdit | None = None) -> RunState:
    policy = ReplayPolicy(source_run=parent.run_id, from_turn=turn)
    calls = recorded_calls(run_calls(parent), _ledger(parent), {"note": False}, from_turn=turn)
    return seed_state(parent, turn, run_id="fork1", recorded=Recorded(policy=policy, calls=calls), edit=edit,
                      now=1.0)


def test_the_turn_a_fork_starts_at() -> None:
    parent = _parent()
    assert fork_turn(parent, "last_failure") == 3 and fork_turn(parent, "last_turn") == 3
    assert fork_turn(parent, 2) == 2
    with pytest.raises(RequestError, match="from: a turn from 1 to 3"):
        fork_turn(parent, 4)
    with pytest.raises(ForkConflict, match="did not fail"):
        fork_turn(parent.model_copy(update={"status": "succeeded"}), "last_failure")
    with pytest.raises(ForkConflict, match="has not ended"):
        fork_turn(parent.model_copy(update={"status": "running"}), 1)


def test_the_plan_lists_the_parents_calls_from_the_turn_on() -> None:
    parent = _parent()
    policy = ReplayPolicy(source_run=parent.run_id, from_turn=2)
    calls = recorded_calls(run_calls(parent), _ledger(parent), {"note": False}, from_turn=2)
    plan = make_plan(2, len(history_before(parent, 2)), calls, policy)
    assert [(c.turn, c.tool_call_id, c.ledger, c.if_repeated) for c in plan.calls] == [(2, "c2", "done", "reused")]
    assert plan.history_messages == 4  # system, query, turn 1's reply and its tool result


@pytest.mark.parametrize("native", [True, False])
def test_a_fork_from_the_last_failure_keeps_the_history_and_runs_nothing_again(native: bool) -> None:
    parent = _parent(native)
    seed = _seed(parent, 3)
    assert seed.iteration == 2 and seed.messages == parent.messages and seed.usage.total_tokens == 0
    llm = ScriptedLLM([final("done") if not native else text("done"), text("synth")],
                      abilities={"tool_call": native})
    sink = ListSink()
    ran.clear()
    state = asyncio.run(run_local(RunRequest(query="take notes"), make_deps(llm, [note]), sink=sink, state=seed))
    assert state.status == "succeeded" and ran == []
    assert sink.events[0].channel == "fork" and sink.events[0].data["forked_from"] == {"run_id": parent.run_id,
                                                                                       "turn": 3}
    assert next(e for e in sink.events if e.channel == "step").data["iteration"] == 3
    assert llm.calls[0].messages == parent.messages


def test_edits_replace_an_observation_add_a_message_and_change_the_model() -> None:
    parent = _parent()
    edit = ForkEdit(message="use the short form", model="other",
                    tool_result={"tool_call_id": "c2", "observation": "note b was lost"})
    seed = _seed(parent, 3, edit)
    assert seed.model == "other"
    assert next(m for m in seed.messages if m.tool_call_id == "c2").content == "note b was lost"
    assert seed.messages[-1].content == "use the short form" and seed.messages[-1].role == "user"
    with pytest.raises(RequestError, match="not a call of turn 2"):
        _seed(parent, 3, ForkEdit(tool_result={"tool_call_id": "c1", "observation": "x"}))


def test_a_guardrail_sees_a_forks_edited_message() -> None:
    async def refuse(ctx: HookContext) -> HookResult:
        return HookResult(allow="forbidden" not in (ctx.query or ""), error="no forbidden words")

    parent = _parent()
    seed = _seed(parent, 3, ForkEdit(message="a forbidden request"))
    llm = ScriptedLLM([], abilities={"tool_call": True})
    guard = Hook(name="words", hook_point=HookPoint.RUN_START, handler=refuse)
    state = asyncio.run(run_local(RunRequest(query="take notes"), make_deps(llm, [note], hooks=[guard]), state=seed))
    assert state.status == "failed" and "no forbidden words" in (state.error or "") and llm.calls == []


def test_a_result_the_ledger_recorded_is_the_observation_the_fork_sees() -> None:
    parent = _parent()
    tool_msg = next(m for m in parent.messages if m.tool_call_id == "c2")
    tool_msg.content = "Tool call cancelled: the run was stopped."  # what a stop answers in the history
    policy = ReplayPolicy(source_run=parent.run_id, from_turn=3)
    seed = seed_state(parent, 3, run_id="f", recorded=Recorded(policy=policy), edit=None, now=1.0,
                      ledger=_ledger(parent))
    assert next(m for m in seed.messages if m.tool_call_id == "c2").content == "noted b"
