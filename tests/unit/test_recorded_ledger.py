"""Answering tool calls from a recorded ledger, in the in-process shell (the Celery shell's
twin is in ``tests/integration/test_fork.py``): each recorded call matches at most once by
tool name and ``args_digest``; the policy decides reuse, run, wait or refuse."""

from __future__ import annotations

import asyncio
from typing import Any

from reactq.shared.engine.recorded import (
    NOT_RECORDED_OBSERVATION, Recorded, ReplayPolicy, decide, ledger_status, recorded_calls, run_calls,
)
from reactq.shared.engine.state import RunState
from reactq.shared.events import ListSink
from reactq.shared.inprocess import run_local
from reactq.shared.llm.testing import ScriptedLLM, text, tool_calls
from reactq.shared.requests import RunRequest
from reactq.shared.tools.base import tool
from tests.unit.engine_kit import make_deps

executed: list[tuple[str, int]] = []


@tool("pay", idempotent=False, isolate=False)
def pay(amount: int) -> str:
    """Pays (not idempotent)."""
    executed.append(("pay", amount))
    return f"paid {amount} (execution {len(executed)})"


@tool("look", isolate=False)
def look(amount: int) -> str:
    """Looks (idempotent)."""
    executed.append(("look", amount))
    return f"looked at {amount}"


NATIVE = {"tool_call": True}


def _parent() -> tuple[RunState, dict[str, dict[str, Any]]]:
    """A parent run: turn 1 pays 5 and looks at 5, turn 2 pays 5 again; its ledger."""
    executed.clear()
    llm = ScriptedLLM([tool_calls(("a", "pay", {"amount": 5}), ("b", "look", {"amount": 5})),
                       tool_calls(("c", "pay", {"amount": 5})), text("done"), text("synth")], abilities=NATIVE)
    state = asyncio.run(run_local(RunRequest(query="pay", completion_check=False), make_deps(llm, [pay, look])))
    assert state.status == "succeeded"
    ledger = {s.tool_call_id: {"status": "done", "outcome": {"tool_call_id": s.tool_call_id, "tool_name": s.tool_name,
                                                             "observation": s.observation, "error": s.error}}
              for s in state.steps if s.tool_call_id}
    return state, ledger


def _recorded(parent: RunState, ledger: dict[str, dict[str, Any]], **policy: Any) -> Recorded:
    p = ReplayPolicy(source_run=parent.run_id, **policy)
    calls = recorded_calls(run_calls(parent), ledger,
                           {"pay": False, "look": True}, from_turn=p.from_turn, only_done=p.match == "done")
    return Recorded(policy=p, calls=calls)


def _child(recorded: Recorded, *calls: tuple[str, str, dict[str, Any]], approver: Any = None) -> tuple[RunState, ListSink]:
    llm = ScriptedLLM([tool_calls(*calls), text("ok"), text("synth")], abilities=NATIVE)
    sink = ListSink()
    state = asyncio.run(run_local(RunRequest(query="again", completion_check=False), make_deps(llm, [pay, look]),
                                  sink=sink, recorded=recorded, approver=approver))
    return state, sink


def _done(sink: ListSink) -> dict[str, dict[str, Any]]:
    return {e.data["tool_call_id"]: e.data for e in sink.events
            if e.data.get("type") == "iteration" and e.data.get("status") == "done"}


def test_effects_reuses_a_non_idempotent_call_once_and_runs_the_rest() -> None:
    parent, ledger = _parent()
    executed.clear()
    # pay 5 was recorded twice (turns 1 and 2): two matches; the third pay 5 runs.
    state, sink = _child(_recorded(parent, ledger), ("x", "pay", {"amount": 5}), ("y", "pay", {"amount": 5}),
                         ("z", "pay", {"amount": 5}), ("w", "look", {"amount": 5}), ("v", "pay", {"amount": 7}))
    done = _done(sink)
    assert state.status == "succeeded"
    assert done["x"]["reused"] is True and done["x"]["observation"] == "paid 5 (execution 1)"
    assert done["y"]["reused"] is True and done["y"]["observation"] == "paid 5 (execution 3)"
    assert "reused" not in done["z"] and "reused" not in done["w"] and "reused" not in done["v"]
    assert sorted(executed) == [("look", 5), ("pay", 5), ("pay", 7)]


def test_all_reuses_idempotent_calls_too_and_none_reuses_nothing() -> None:
    parent, ledger = _parent()
    executed.clear()
    _, sink = _child(_recorded(parent, ledger, reuse="all"), ("w", "look", {"amount": 5}))
    assert _done(sink)["w"]["reused"] is True and executed == []
    _, sink = _child(_recorded(parent, ledger, reuse="none"), ("x", "pay", {"amount": 5}))
    assert "reused" not in _done(sink)["x"] and executed == [("pay", 5)]


def test_from_turn_leaves_earlier_calls_out() -> None:
    parent, ledger = _parent()
    rec = _recorded(parent, ledger, from_turn=2)
    assert [c.tool_call_id for c in rec.calls] == ["c"]


def test_an_uncertain_recorded_call_waits_for_a_person_naming_the_recorded_run() -> None:
    parent, ledger = _parent()
    ledger["a"]["outcome"]["uncertain"] = True
    asked: list[dict[str, Any]] = []

    async def approver(rec: dict[str, Any]) -> dict[str, Any]:
        asked.append(rec)
        return {"decision": "approve", "by": "ana"}

    executed.clear()
    _, sink = _child(_recorded(parent, ledger), ("x", "pay", {"amount": 5}), approver=approver)
    assert len(asked) == 1 and parent.run_id in asked[0]["reason"]
    assert [e.data["status"] for e in sink.events if e.channel == "approval"] == ["requested", "approved"]
    assert executed == [("pay", 5)]  # approved: it runs


def test_a_replay_refuses_an_unrecorded_call_and_matches_only_done_calls() -> None:
    parent, ledger = _parent()
    ledger["a"]["outcome"]["error"] = "boom"  # recorded, but failed: a replay does not match it
    rec = _recorded(parent, ledger, reuse="all", match="done", unmatched="refuse", label="the replayed eval")
    executed.clear()
    _, sink = _child(rec, ("x", "pay", {"amount": 5}), ("y", "pay", {"amount": 5}), ("z", "look", {"amount": 9}))
    done = _done(sink)
    assert done["x"]["reused"] is True and done["x"]["observation"] == "paid 5 (execution 3)"
    refused = NOT_RECORDED_OBSERVATION.format(label="the replayed eval")
    assert done["y"]["observation"] == refused and done["z"]["observation"] == refused
    assert executed == []


def test_the_rule_and_the_ledger_statuses() -> None:
    assert ledger_status(None) == "not_run"
    assert ledger_status({"status": "pending"}) == "uncertain"
    assert ledger_status({"status": "done", "outcome": {"crashed": True}}) == "uncertain"
    assert ledger_status({"status": "done", "outcome": {"approval": "rejected"}}) == "not_run"
    assert ledger_status({"status": "done", "outcome": {"error": "x"}}) == "failed"
    assert ledger_status({"status": "done", "outcome": {"observation": "ok"}}) == "done"
    policy = ReplayPolicy(source_run="r1")
    assert decide(policy, None).action == "run"
    assert decide(policy.model_copy(update={"unmatched": "refuse"}), None).action == "refuse"
