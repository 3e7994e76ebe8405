"""Group L — the run's event protocol (SPEC S77–S80, DESIGN.md "Events"), and resumability.

Also: the run state round-trips through ``dump_state``/``load_state`` after every step, and
a run continued from reloaded states produces exactly the events of an uninterrupted run
(what the Celery shell relies on).
"""

from __future__ import annotations

from typing import Any

import pytest
from engine_kit import (
    JSON,
    MODES,
    NATIVE,
    SYNTH,
    ManualIO,
    Mode,
    echo_tool,
    make_deps,
    raising_tool,
    run,
    stub_tools,
)
from reactq.shared.engine.context import ContextGuard
from reactq.shared.engine.state import dump_state, load_state
from reactq.shared.errors import StateConflict
from reactq.shared.events import CHANNELS, ListSink
from reactq.shared.inprocess import InterruptQueue, advance, new_state, run_local
from reactq.shared.llm.testing import FunctionLLM, ScriptedLLM, final, text, tool_calls, tool_json
from reactq.shared.requests import RunRequest

# DESIGN.md "Events": the fields each payload must carry (extras allowed), plus seq.
REQUIRED: dict[tuple[str, str | None, str | None], set[str]] = {
    ("step", "thinking", "start"): {"type", "status", "iteration"},
    ("step", "thinking", "done"): {"type", "status", "iteration", "reasoning"},
    ("step", "iteration", "start"): {"type", "status", "iteration", "tool_name", "tool_args", "tool_call_id"},
    ("step", "iteration", "done"): {"type", "status", "iteration", "tool_name", "tool_call_id",
                                    "observation", "error", "iter_elapsed"},
    ("step", "answer", "start"): {"type", "status"},
    ("answer", None, "start"): {"status"},
    ("answer", None, "delta"): {"status", "content"},
    ("answer", None, "done"): {"status"},
    ("compact", None, None): {"original_messages", "kept_messages"},
    ("phase", None, None): {"phase", "total_tools"},
    ("inject", "inject", None): {"type", "content"},
    ("error", None, None): {"message", "kind"},
    ("done", None, None): {"answer", "iterations", "usage", "elapsed", "status"},
}


def key(e: Any) -> tuple[str, str | None, str | None]:
    return (e.channel, e.data.get("type"), e.data.get("status") if e.channel in ("step", "answer") else None)


def shape(events: list[Any]) -> list[tuple[str, str | None, str | None]]:
    return [key(e) for e in events]


def assert_well_formed(events: list[Any]) -> None:
    """seq 1..n contiguous; done last, exactly once; every payload has its required keys."""
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.channel for e in events].count("done") == 1
    assert events[-1].channel == "done"
    for e in events:
        assert e.channel in CHANNELS
        required = REQUIRED.get(key(e))
        assert required is not None, f"unexpected event {key(e)}"
        missing = (required | {"seq"}) - set(e.data)
        assert not missing, f"{key(e)} lacks {missing}"


# --------------------------------------------------------------------------- S77 order


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_one_tool_call_produces_exactly_the_seed_event_sequence(mode: Mode) -> None:
    """S77: thinking start/done(1) → iteration start/done(1) → thinking start/done(2) → answer → done."""
    llm = mode.llm([mode.call("echo", {"text": "hi"}), mode.answer("done"), text("Hello there.")])

    out = await run(llm, [echo_tool()])

    assert shape(out.events) == [
        ("step", "thinking", "start"),
        ("step", "thinking", "done"),
        ("step", "iteration", "start"),
        ("step", "iteration", "done"),
        ("step", "thinking", "start"),
        ("step", "thinking", "done"),
        ("step", "answer", "start"),
        ("answer", None, "start"),
        ("answer", None, "delta"),
        ("answer", None, "delta"),
        ("answer", None, "done"),
        ("done", None, None),
    ]
    assert [e.data.get("iteration") for e in out.events[:6]] == [1, 1, 1, 1, 2, 2]
    assert_well_formed(out.events)
    start, done = out.events[2].data, out.events[3].data
    assert (start["tool_name"], start["tool_args"], start["tool_call_id"]) == ("echo", {"text": "hi"},
                                                                              done["tool_call_id"])
    assert (done["observation"], done["error"]) == ("hi", None)


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_done_reports_answer_iterations_usage_elapsed_and_status(mode: Mode) -> None:
    """S78: done.answer = streamed text; iterations = result iterations; usage = loop usage; elapsed."""
    ticks = iter(range(1000))
    clock = lambda: float(next(ticks))  # noqa: E731 — every reading is one second later
    llm = mode.llm([mode.answer("brief", usage={"prompt_tokens": 4, "completion_tokens": 1}),
                    text("Full answer.")])
    deps = make_deps(llm, [], clock=clock)

    out = await run(llm, deps=deps)

    done = out.done
    assert done["answer"] == "Full answer."
    assert done["iterations"] == 1
    assert done["usage"]["prompt_tokens"] == 4 and done["usage"]["total_tokens"] == 5
    assert done["status"] == "succeeded"
    assert done["elapsed"] > 0 and round(done["elapsed"], 2) == done["elapsed"]


async def test_iter_elapsed_is_measured_from_the_tool_start_in_seconds() -> None:
    """S78: iter_elapsed = seconds (2 decimals) since the matching start."""
    now = [100.0]

    def slow(text: str) -> str:
        now[0] += 1.234
        return text

    from engine_kit import TextArgs
    from reactq.shared.tools.base import Tool

    tool = Tool(name="echo", description="Echo.", args_model=TextArgs, fn=slow)
    llm = NATIVE.llm([NATIVE.call("echo", {"text": "x"}), NATIVE.answer("ok"), SYNTH])

    out = await run(llm, deps=make_deps(llm, [tool], clock=lambda: now[0]))

    (done,) = out.of("step", type="iteration", status="done")
    assert done["iter_elapsed"] == 1.23


async def test_the_selection_phase_event_comes_first_with_thirteen_tools() -> None:
    """S31/L: 13 tools ⇒ phase {phase:"selecting_tools", total_tools:13} before the first iteration."""
    llm = ScriptedLLM([text('{"tools": ["tool_0", "tool_1"]}'), tool_json("tool_0", {}), final("done"), SYNTH])

    out = await run(llm, stub_tools(13), query="zzz qqq")

    assert out.events[0].channel == "phase"
    assert {k: v for k, v in out.events[0].data.items() if k != "seq"} == {
        "phase": "selecting_tools", "total_tools": 13}
    first_iteration = shape(out.events).index(("step", "iteration", "start"))
    assert first_iteration > 0
    assert len(out.of("phase")) == 1
    assert_well_formed(out.events)
    # The loop offered only the selected tools (S35).
    assert "tool_2" not in out.loop_calls()[1].messages[0].text()


async def test_twelve_tools_emit_no_phase_event() -> None:
    """S29: 12 tools ⇒ no selection, no phase event, one LLM call fewer."""
    llm = ScriptedLLM([final("done"), SYNTH])

    out = await run(llm, stub_tools(12))

    assert out.of("phase") == []
    assert len(out.loop_calls()) == 1


async def test_compaction_emits_a_compact_event_inside_the_turn() -> None:
    """S6/S63/S70: over budget ⇒ the guard compacts after thinking start, before the call; compact event."""
    llm = JSON.llm([JSON.call("echo", {"text": "y" * 4000}), JSON.answer("done"), SYNTH])
    deps = make_deps(llm, [echo_tool()], guard=ContextGuard(budget=700))

    out = await run(llm, deps=deps)

    compacts = out.of("compact")
    assert compacts and compacts[0]["kept_messages"] < compacts[0]["original_messages"]
    s = shape(out.events)
    i = s.index(("compact", None, None))
    assert s[i - 1] == ("step", "thinking", "start") and s[i + 1] == ("step", "thinking", "done")
    assert_well_formed(out.events)


async def test_the_guard_is_asked_with_the_react_iteration_hint() -> None:
    """S6: check_and_compact(messages, hint="react_iteration") before every loop call."""
    hints: list[str] = []

    class SpyGuard(ContextGuard):
        async def check_and_compact(self, messages, budget=None, hint="general"):  # noqa: ANN001, ANN201
            hints.append(hint)
            return list(messages)

    llm = JSON.llm([JSON.call("echo", {"text": "a"}), JSON.answer("done"), SYNTH])

    out = await run(llm, deps=make_deps(llm, [echo_tool()], guard=SpyGuard()))

    assert hints == ["react_iteration", "react_iteration"]
    assert out.of("compact") == []  # nothing shrank


# --------------------------------------------------------------------------- S79, S80


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_warnings_reflection_and_the_checklist_produce_no_events(mode: Mode) -> None:
    """S79: cycle warnings, self-check, checklist and the consumed verification turn emit nothing."""
    script = [mode.call("echo", {"text": "same"}, call_id=f"c{i}") for i in range(6)]
    script += [mode.answer("first"), mode.answer("verification"), mode.answer("final"), SYNTH]
    llm = mode.llm(script)

    out = await run(llm, [echo_tool()], max_iterations=20)

    assert out.answer == "final"
    assert_well_formed(out.events)
    s = shape(out.events)
    assert s.count(("step", "thinking", "start")) == len(out.loop_calls()) == 9
    assert s.count(("step", "iteration", "start")) == 6
    assert s.count(("step", "answer", "start")) == 1  # the discarded turns had no answer signal
    blob = repr([e.data for e in out.events])
    for internal in ("identical arguments", "[Self-check]", "Before finalizing", "user-facing final answer"):
        assert internal not in blob


@pytest.mark.parametrize(
    "scenario",
    ["success", "max_iterations", "llm_error", "synthesis_error", "tool_error", "cancel"],
)
async def test_done_is_always_last_exactly_once_and_seq_is_contiguous(scenario: str) -> None:
    """S80/DESIGN invariant 5: every ending ⇒ one done, last; seq 1..n without gaps."""
    import asyncio

    cancel = asyncio.Event()
    status = "succeeded"
    fallback = False
    tools = [echo_tool(), raising_tool(RuntimeError("bad"))]
    if scenario == "success":
        llm = NATIVE.llm([NATIVE.call("echo", {"text": "a"}), NATIVE.answer("ok"), SYNTH])
    elif scenario == "max_iterations":
        llm = NATIVE.llm([NATIVE.call("echo", {"text": "a"})], repeat_last=True)
        fallback = True
    elif scenario == "llm_error":
        llm = NATIVE.llm([RuntimeError("down")])
        status = "failed"
    elif scenario == "synthesis_error":
        llm = NATIVE.llm([NATIVE.answer("ok"), RuntimeError("stream down")])
        fallback = True
    elif scenario == "tool_error":
        llm = NATIVE.llm([NATIVE.call("boom", {}), NATIVE.answer("ok"), SYNTH])
    else:
        llm = FunctionLLM(lambda m, k: (cancel.set(), tool_calls(("c1", "echo", {"text": "a"})))[1],
                          abilities={"tool_call": True})
        status = "cancelled"

    out = await run(llm, tools, cancel=cancel, max_iterations=3, status=status, allow_fallback=fallback)

    assert_well_formed(out.events)
    assert out.done["status"] == status


# --------------------------------------------------------------------------- resumability


async def drive_with_reload(request: RunRequest, script: list[Any], abilities: dict[str, bool],
                            queue: InterruptQueue, tools: list[Any]) -> tuple[list[Any], Any]:
    """Run step by step through ``advance``, reloading the state from JSON after every step."""
    llm = ScriptedLLM(script, abilities=abilities)
    deps = make_deps(llm, tools, clock=lambda: 1000.0)
    io = ManualIO(queue)
    state = new_state(request, deps, run_id="run-1")
    steps = 0
    while state.phase != "done":
        await io.publish(await advance(state, deps, io))
        raw = dump_state(state)
        reloaded = load_state(raw)
        assert reloaded == state
        assert dump_state(reloaded) == raw
        state = reloaded
        steps += 1
        assert steps < 100
    return io.events, state


async def drive_straight(request: RunRequest, script: list[Any], abilities: dict[str, bool],
                         queue: InterruptQueue, tools: list[Any]) -> tuple[list[Any], Any]:
    llm = ScriptedLLM(script, abilities=abilities)
    deps = make_deps(llm, tools, clock=lambda: 1000.0)
    sink = ListSink()
    state = await run_local(request, deps, sink=sink, interrupts=queue, run_id="run-1")
    return sink.events, state


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_a_run_continued_from_reloaded_states_gives_the_same_events(mode: Mode) -> None:
    """§O/DESIGN: state round-trips after every step; resuming from it yields identical events.

    The scenario touches most state: a parse retry or tool batch, an interrupt, cycle
    warnings, a failed call, the checklist with its verification turn, usage, the synthesis.
    """
    usage = {"prompt_tokens": 3, "completion_tokens": 2}
    if mode.native:
        script: list[Any] = [
            tool_calls(("c1", "echo", {"text": "s"}), ("c2", "boom", {}), reasoning_content="r", usage=usage),
            tool_calls(("c3", "echo", {"text": "s"}), content="again"),
            tool_calls(("c4", "echo", {"text": "s"})),
        ]
    else:
        script = [text("not json"), tool_json("echo", {"text": "s"}, usage=usage), tool_json("boom", {}),
                  tool_json("echo", {"text": "s"}), tool_json("echo", {"text": "s"})]
    script += [mode.answer("first"), mode.answer("verifying ✓"), mode.answer("final"),
               text("The synthesized answer.")]
    request = RunRequest(query="Tell me things", max_iterations=20)
    tools = [echo_tool(), raising_tool(RuntimeError("bad"))]
    queue = InterruptQueue()  # draining never removes messages, so both runs can share it
    queue.put("hey")

    reloaded_events, reloaded_state = await drive_with_reload(request, script, mode.abilities, queue, tools)
    straight_events, straight_state = await drive_straight(request, script, mode.abilities, queue, tools)

    assert [(e.channel, e.data) for e in reloaded_events] == [(e.channel, e.data) for e in straight_events]
    assert reloaded_state == straight_state
    assert reloaded_state.status == "succeeded"
    assert reloaded_state.answer == "final"
    assert any(e.channel == "inject" for e in reloaded_events)
    assert_well_formed(reloaded_events)


async def test_a_state_saved_mid_turn_resumes_the_pending_tool_calls() -> None:
    """§O: a state saved in phase "tools" holds the pending calls; another process can run them."""
    llm = NATIVE.llm([tool_calls(("c1", "echo", {"text": "a"}), ("c2", "echo", {"text": "b"})),
                      NATIVE.answer("ok"), SYNTH])
    deps = make_deps(llm, [echo_tool()], clock=lambda: 5.0)
    io = ManualIO()
    state = new_state(RunRequest(query="q"), deps, run_id="r")
    while state.phase != "tools":
        await io.publish(await advance(state, deps, io))

    saved = load_state(dump_state(state))
    assert [c.id for c in saved.pending_calls] == ["c1", "c2"]
    while saved.phase != "done":
        await io.publish(await advance(saved, deps, io))

    assert saved.answer == "ok"
    assert [s.observation for s in saved.steps[:2]] == ["a", "b"]
    assert_well_formed(io.events)


def test_load_state_refuses_an_unknown_schema_version() -> None:
    """DESIGN §11: persisted state is versioned; unknown versions fail fast."""
    from reactq.shared.engine.state import RunState

    raw = dump_state(RunState(run_id="r", query="q", model="m", mode="json", max_iterations=3))
    with pytest.raises(StateConflict, match="schema version"):
        load_state(raw.replace('"schema_version":1', '"schema_version":999'))
