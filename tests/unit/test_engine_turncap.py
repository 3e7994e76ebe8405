"""Issue 10, item 3 in the engine (both shells share it): at most
``REACTQ_MAX_TOOL_CALLS_PER_TURN`` calls of one reply run; the rest are answered with an
error observation, so the history stays valid."""

from __future__ import annotations

import pytest

from reactq.shared.engine import ending, loop
from reactq.shared.engine.state import load_state
from reactq.shared.llm.testing import ScriptedLLM, text, tool_calls
from reactq.shared.settings import EngineConfig
from tests.unit.engine_kit import SYNTH, Recorder, echo_tool, run


def test_the_cap_defaults_to_16_and_reads_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REACTQ_MAX_TOOL_CALLS_PER_TURN", raising=False)
    assert EngineConfig().max_tool_calls_per_turn == 16
    monkeypatch.setenv("REACTQ_MAX_TOOL_CALLS_PER_TURN", "3")
    assert EngineConfig().max_tool_calls_per_turn == 3


async def test_calls_past_the_cap_are_not_run_and_get_an_error_observation() -> None:
    rec = Recorder()
    calls = [(f"c{i}", "echo", {"text": str(i)}) for i in range(32)]
    llm = ScriptedLLM([tool_calls(*calls), text("done"), SYNTH], abilities={"tool_call": True})

    out = await run(llm, [echo_tool(rec)])

    assert rec.calls == [("echo", {"text": str(i)}) for i in range(16)]
    tool_msgs = [m for m in out.loop_calls()[1].messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_msgs] == [f"c{i}" for i in range(32)]
    assert [m.content for m in tool_msgs[:16]] == [str(i) for i in range(16)]
    assert all("asked for 32 tool calls and at most 16 run per turn" in m.content for m in tool_msgs[16:])
    starts = out.of("step", type="iteration", status="start")
    dones = out.of("step", type="iteration", status="done")
    assert len(starts) == len(dones) == 32
    assert [d["error"] is None for d in dones] == [True] * 16 + [False] * 16


async def test_the_cap_is_configurable() -> None:
    rec = Recorder()
    calls = [(f"c{i}", "echo", {"text": str(i)}) for i in range(5)]
    llm = ScriptedLLM([tool_calls(*calls), text("done"), SYNTH], abilities={"tool_call": True})
    await run(llm, [echo_tool(rec)], config=EngineConfig(max_tool_calls_per_turn=2))
    assert len(rec.calls) == 2


def test_refused_calls_survive_a_state_round_trip_and_cancel_answers_them() -> None:
    """The Celery shell persists the state between the tool tasks and the fan-in."""
    from reactq.shared.engine.state import RunState, dump_state
    from reactq.shared.models import ToolCallRequest

    state = RunState(run_id="r", query="q", model="m", mode="native", max_iterations=5)
    calls = [ToolCallRequest(id=f"c{i}", name="echo", arguments={}) for i in range(3)]
    loop._dispatch(state, calls, "", 0.0, cap=1)
    again = load_state(dump_state(state))
    assert [c.id for c in again.pending_calls] == ["c0"]
    assert [c.id for c in again.refused_calls] == ["c1", "c2"]
    ending.cancel(again, now=1.0)
    assert [m.tool_call_id for m in again.messages if m.role == "tool"] == ["c0", "c1", "c2"]
    assert again.refused_calls == []
