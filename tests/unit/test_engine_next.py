"""The typed next step (``next.next_step``, ``Advance``) and the run's one result
(``result.run_result``), driven in-process with the function fakes of ``shared/llm/testing``."""

from __future__ import annotations

import typing
from typing import Any

import pytest

from reactq.shared.engine import ending
from reactq.shared.engine.next import Advance, Answer, CallLLM, Done, RunTools, SelectTools, next_step
from reactq.shared.engine.result import ELAPSED_DIGITS, RunResult, run_result
from reactq.shared.engine.state import Phase, RunState
from reactq.shared.errors import StateConflict
from reactq.shared.inprocess import new_state, take_step
from reactq.shared.llm.testing import FunctionLLM, text, tool_calls
from reactq.shared.models import ChatMessage
from reactq.shared.requests import RunRequest
from reactq.shared.settings import EngineConfig
from tests.unit.engine_kit import ManualIO, echo_tool, make_deps

NATIVE = {"tool_call": True}


def _turns(*replies: Any) -> FunctionLLM:
    """A model that answers the n-th call (loop turns and the synthesis alike) with replies[n]."""
    it = iter(replies)

    def fn(messages: list[ChatMessage], kwargs: dict[str, Any]) -> Any:
        return next(it)

    return FunctionLLM(fn, abilities=NATIVE)


async def _walk(llm: FunctionLLM, tools: list[Any], *, clock: Any = None, **request: Any) -> tuple[
        list[Advance], RunState, ManualIO]:
    deps = make_deps(llm, tools, **({"clock": clock} if clock else {}))
    state = new_state(RunRequest(query="q", **request), deps, run_id="r1")
    io = ManualIO()
    out: list[Advance] = []
    while not isinstance(next_step(state), Done):
        adv = await take_step(state, deps, io)
        await io.publish(adv.events)
        out.append(adv)
        assert len(out) < 50
    return out, state, io


async def test_each_step_says_which_step_ran_and_what_comes_next() -> None:
    llm = _turns(tool_calls(("a", "echo", {"text": "1"}), ("b", "echo", {"text": "2"})),
                 text("brief"), text("The answer."))

    steps, state, _ = await _walk(llm, [echo_tool()])

    calls = steps[1].next
    assert isinstance(calls, RunTools) and [c.id for c in calls.calls] == ["a", "b"]
    assert [(type(s.step), type(s.next)) for s in steps] == [
        (SelectTools, CallLLM), (CallLLM, RunTools), (RunTools, CallLLM), (CallLLM, Answer),
        (Answer, Done),
    ]
    assert steps[2].step == calls  # the fan-in names the calls it finished
    assert steps[-1].next == Done(run_result(state))
    assert next_step(state) == steps[-1].next


async def test_the_calls_past_the_per_turn_cap_are_not_among_the_calls_to_run() -> None:
    llm = _turns(tool_calls(*[(f"c{i}", "echo", {"text": str(i)}) for i in range(5)]), text("ok"), text("A."))
    deps = make_deps(llm, [echo_tool()], config=EngineConfig(max_tool_calls_per_turn=2))
    state = new_state(RunRequest(query="q"), deps, run_id="r")
    io = ManualIO()
    await take_step(state, deps, io)

    adv = await take_step(state, deps, io)

    assert adv.next == RunTools(tuple(state.pending_calls))
    assert isinstance(adv.next, RunTools) and [c.id for c in adv.next.calls] == ["c0", "c1"]
    assert [c.id for c in state.refused_calls] == ["c2", "c3", "c4"]


async def test_a_failed_step_ends_the_run_with_no_step_named_as_its_producer() -> None:
    llm = _turns(TimeoutError("model timed out"))

    steps, state, io = await _walk(llm, [])

    assert [type(s.step) for s in steps] == [SelectTools, type(None)]
    done = steps[-1].next
    assert isinstance(done, Done) and done.result.status == "failed"
    assert done.result.answer == "Agent error: TimeoutError: model timed out"
    assert io.events[-1].channel == "done"


async def test_taking_a_step_after_the_end_is_refused() -> None:
    _, state, _ = await _walk(_turns(text("brief"), text("A.")), [])
    with pytest.raises(StateConflict):
        await take_step(state, make_deps(_turns(), []), ManualIO())


def test_next_step_covers_every_phase() -> None:
    """One kind of next step per persisted phase, and nothing else."""
    state = RunState(run_id="r", query="q", model="m", mode="native", max_iterations=3)
    kinds = {}
    for phase in typing.get_args(Phase):
        state.phase = phase
        kinds[phase] = type(next_step(state))
    assert kinds == {"select": SelectTools, "llm": CallLLM, "tools": RunTools, "answer": Answer, "done": Done}


# --------------------------------------------------------------------------- the run's result


def _done_payload(io: ManualIO) -> dict[str, Any]:
    return next(e.data for e in io.events if e.channel == "done")


def _as_done(result: RunResult) -> dict[str, Any]:
    return {k: v for k, v in result.as_dict().items() if k in ("answer", "iterations", "usage", "elapsed", "status")}


async def test_the_done_event_and_the_result_agree_on_a_finished_run() -> None:
    ticks = iter(x * 1.23456 for x in range(100))
    llm = _turns(tool_calls(("a", "echo", {"text": "1"}), usage={"prompt_tokens": 3, "completion_tokens": 2}),
                 text("brief"), text("The answer."))

    _, state, io = await _walk(llm, [echo_tool()], clock=lambda: next(ticks))

    result = run_result(state)
    done = _done_payload(io)
    assert {k: done[k] for k in ("answer", "iterations", "usage", "elapsed", "status")} == _as_done(result)
    assert result.elapsed == round(result.elapsed, ELAPSED_DIGITS) and result.elapsed > 0
    assert (result.answer, result.iterations, result.status) == ("The answer.", 2, "succeeded")
    assert (result.mode, result.model, result.error) == ("native", "function-llm", None)
    assert result.usage["total_tokens"] == 5


async def test_a_failed_run_reports_no_iterations_in_the_event_and_the_result_alike() -> None:
    """S80: a failure reports ``iterations: 0`` (the stored result said 2 here before)."""
    llm = _turns(tool_calls(("a", "echo", {"text": "1"})), RuntimeError("down"))

    _, state, io = await _walk(llm, [echo_tool()])

    assert state.iteration == 2
    result = run_result(state)
    assert (result.iterations, result.status, result.error) == (0, "failed", "RuntimeError: down")
    assert _as_done(result) == {k: _done_payload(io)[k] for k in _as_done(result)}


def test_a_cancelled_run_keeps_its_turn_count_and_its_loop_answer() -> None:
    state = RunState(run_id="r", query="q", model="m", mode="json", max_iterations=5,
                     started_at=10.0, iteration=3, answer="so far")
    events = ending.cancel(state, now=12.3456)
    result = run_result(state)
    assert (result.iterations, result.answer, result.status, result.elapsed) == (3, "so far", "cancelled", 2.35)
    assert _as_done(result) == {k: events[-1].data[k] for k in _as_done(result)}



def test_the_engine_default_config_is_the_seeds_whatever_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """``EngineDeps`` without a config gets the seed's values; ``EngineConfig()`` (the edge)
    reads the environment."""
    import os

    for name in list(os.environ):
        if name.startswith(("REACT_", "REACTQ_", "CONTEXT_GUARD_", "COMPACT_CATALOG_")):
            monkeypatch.delenv(name)
    seed = EngineConfig()
    monkeypatch.setenv("REACTQ_CYCLE_DETECTION_THRESHOLD", "7")
    assert EngineConfig.defaults() == seed and EngineConfig().cycle_detection_threshold == 7
    assert make_deps(_turns(), []).config.cycle_detection_threshold == 7  # the kit reads it, as a shell
    from reactq.shared.engine.deps import EngineDeps

    assert EngineDeps(llm=_turns(), registry=make_deps(_turns(), []).registry).config == seed
