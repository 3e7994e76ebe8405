"""Groups E and F — mid-loop self-reflection (S37–S39) and cycle detection (S40–S42)."""

from __future__ import annotations

import pytest

from engine_kit import (
    MODES,
    NATIVE,
    SELF_CHECK_HEAD,
    SYNTH,
    Mode,
    count_containing,
    echo_tool,
    make_deps,
    raising_tool,
    run,
)
from reactq.shared.llm.testing import ScriptedLLM, text, tool_calls
from reactq.shared.settings import EngineConfig


def distinct_calls(mode: Mode, n: int) -> list:
    """n tool-call turns with different arguments (no cycle warnings)."""
    return [mode.call("echo", {"text": f"t{i}"}, call_id=f"c{i}") for i in range(n)]


def identical_calls(mode: Mode, n: int, value: str = "same_input") -> list:
    return [mode.call("echo", {"text": value}, call_id=f"c{i}") for i in range(n)]


# --------------------------------------------------------------------------- E self-reflection


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_five_tool_turns_never_see_a_self_check(mode: Mode) -> None:
    """S39, T-E1: 5 tool calls then final, max_iterations=10 ⇒ no [Self-check] in any call."""
    llm = mode.llm(distinct_calls(mode, 5) + [mode.answer("done"), SYNTH])

    out = await run(llm, [echo_tool()], max_iterations=10, completion_check=False)

    assert all(count_containing(c.messages, SELF_CHECK_HEAD) == 0 for c in out.llm.calls)


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_six_tool_turns_get_exactly_one_self_check_with_the_exact_text(mode: Mode) -> None:
    """S37, T-E2: 6 tool turns, max 15 ⇒ one [Self-check] with the original query, exact wording."""
    query = "Find the tallest mountain"
    llm = mode.llm(distinct_calls(mode, 6) + [mode.answer("done"), SYNTH])

    out = await run(llm, [echo_tool()], query=query, max_iterations=15, completion_check=False)

    last = out.loop_calls()[-1].messages
    checks = [m for m in last if SELF_CHECK_HEAD in m.text()]
    assert len(checks) == 1
    assert checks[0].role == "user"
    assert checks[0].content == (
        "[Self-check] You have completed 6 tool-call iterations. Pause and reflect:\n"
        f"- Original goal: {query}\n"
        "- Are you still on track toward this goal?\n"
        "- Have you been repeating similar actions or going in circles?\n"
        "- What is the most direct next step to finish?\n"
        "If you have enough information, produce your final answer now."
    )
    # It is appended right after the 6th turn (the 7th call is the first to see it).
    assert count_containing(out.loop_calls()[5].messages, SELF_CHECK_HEAD) == 0
    assert last[-1] is checks[0]


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_twelve_tool_turns_get_two_self_checks(mode: Mode) -> None:
    """S37/S39, T-E2: 12 tool turns, max 20 ⇒ two self-checks (at 6 and 12)."""
    llm = mode.llm(distinct_calls(mode, 12) + [mode.answer("done"), SYNTH])

    out = await run(llm, [echo_tool()], max_iterations=20, completion_check=False)

    last = out.loop_calls()[-1].messages
    checks = [m.text() for m in last if SELF_CHECK_HEAD in m.text()]
    assert len(checks) == 2
    assert "completed 6 tool-call" in checks[0] and "completed 12 tool-call" in checks[1]


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_no_self_check_on_the_last_turn(mode: Mode) -> None:
    """S37, T-E3: max_iterations=6, all tool calls ⇒ 6 iterations and no reflection (6 == max)."""
    llm = mode.llm(distinct_calls(mode, 6) + [SYNTH])

    out = await run(llm, [echo_tool()], max_iterations=6)

    assert out.done["iterations"] == 6
    assert "unable to complete the task within 6 iterations" in out.answer
    assert all(count_containing(m.messages, SELF_CHECK_HEAD) == 0 for m in out.loop_calls())
    assert count_containing(out.state.messages, SELF_CHECK_HEAD) == 0


async def test_the_json_self_check_follows_the_observation_and_cycle_warning() -> None:
    """S38: JSON order after the 6th turn: assistant → Observation → cycle warning → self-check."""
    from engine_kit import JSON

    calls = distinct_calls(JSON, 3) + identical_calls(JSON, 3, "x")
    llm = JSON.llm(calls + [JSON.answer("done"), SYNTH])

    out = await run(llm, [echo_tool()], max_iterations=15, completion_check=False)

    tail = out.loop_calls()[6].messages[-4:]
    assert tail[0].role == "assistant"
    assert tail[1].content == "Observation: x"
    assert "with identical arguments 3 times" in tail[2].text()
    assert tail[3].text().startswith(SELF_CHECK_HEAD)


async def test_the_native_self_check_comes_after_tool_messages_warnings_and_interrupts() -> None:
    """S38: native order: assistant(tool_calls) → tool… → cycle warning → [USER INTERRUPT] → self-check."""
    from reactq.shared.inprocess import InterruptQueue

    queue = InterruptQueue()
    turns = [tool_calls((f"c{i}", "echo", {"text": f"t{i}"})) for i in range(3)]
    turns += [tool_calls((f"d{i}", "echo", {"text": "x"})) for i in range(2)]
    sixth = tool_calls(("e1", "echo", {"text": "x"}), ("e2", "echo", {"text": "y"}))

    def respond(messages, kwargs):  # noqa: ANN001
        n = len(llm.calls)
        if n == 6:
            queue.put("hurry up")
        script = turns + [sixth, text("done"), SYNTH]
        return script[n - 1]

    from reactq.shared.llm.testing import FunctionLLM

    llm = FunctionLLM(respond, abilities={"tool_call": True})
    out = await run(llm, [echo_tool()], interrupts=queue, max_iterations=15, completion_check=False)

    tail = out.loop_calls()[6].messages[-6:]
    assert [m.role for m in tail] == ["assistant", "tool", "tool", "user", "user", "user"]
    assert "with identical arguments 3 times" in tail[3].text()
    assert tail[4].text().startswith("[USER INTERRUPT]: hurry up")
    assert tail[5].text().startswith(SELF_CHECK_HEAD)


async def test_parse_retries_do_not_count_toward_the_self_check() -> None:
    """S17/S37: JSON parse retries never count as tool-call iterations."""
    from engine_kit import JSON

    script = distinct_calls(JSON, 3) + [text("not json")] + distinct_calls(JSON, 2)
    llm = JSON.llm(script + [JSON.answer("done"), SYNTH])

    out = await run(llm, [echo_tool()], max_iterations=15, completion_check=False)

    assert count_containing(out.loop_calls()[-1].messages, SELF_CHECK_HEAD) == 0


async def test_the_reflection_interval_is_configurable() -> None:
    """S37: REACT_SELF_REFLECTION_INTERVAL sets the interval."""
    from engine_kit import JSON

    llm = JSON.llm(distinct_calls(JSON, 2) + [JSON.answer("done"), SYNTH])
    config = EngineConfig(REACTQ_SELF_REFLECTION_INTERVAL=2)

    out = await run(llm, [echo_tool()], config=config, completion_check=False)

    assert count_containing(out.loop_calls()[-1].messages, "completed 2 tool-call iterations") == 1


# --------------------------------------------------------------------------- F cycle detection


def warning_text(tool: str, n: int) -> str:
    return (f"\u26a0 You have called `{tool}` with identical arguments {n} times and received "
            "the same result. Please try a different approach or tool.")


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_three_identical_calls_produce_the_exact_cycle_warning(mode: Mode) -> None:
    """S41, T-F1: 3× echo{text:"same_input"} ⇒ the last call sees the "⚠ " warning, exact text."""
    llm = mode.llm(identical_calls(mode, 3) + [mode.answer("done"), SYNTH])

    out = await run(llm, [echo_tool()], completion_check=False)

    last = out.loop_calls()[-1].messages
    warnings = [m for m in last if "identical arguments" in m.text()]
    assert [(m.role, m.content) for m in warnings] == [("user", warning_text("echo", 3))]
    assert warnings[0].text().startswith("\u26a0 ")


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_the_warning_fires_again_with_the_new_count(mode: Mode) -> None:
    """S41: each further identical call warns again with its count (3, then 4)."""
    llm = mode.llm(identical_calls(mode, 4) + [mode.answer("done"), SYNTH])

    out = await run(llm, [echo_tool()], completion_check=False)

    warnings = [m.content for m in out.loop_calls()[-1].messages if "identical arguments" in m.text()]
    assert warnings == [warning_text("echo", 3), warning_text("echo", 4)]


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_different_arguments_or_too_few_repeats_never_warn(mode: Mode) -> None:
    """S40/S41, T-F2: 4 calls with different args ⇒ no warning; 2 identical calls ⇒ none either."""
    for script in (distinct_calls(mode, 4), identical_calls(mode, 2)):
        llm = mode.llm(script + [mode.answer("done"), SYNTH])
        out = await run(llm, [echo_tool()], completion_check=False)
        assert all(count_containing(c.messages, "identical arguments") == 0 for c in out.llm.calls)


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_each_run_starts_with_a_fresh_cycle_tracker(mode: Mode) -> None:
    """S40, T-F3: two runs on the same deps, each with 2 identical calls ⇒ no warning in run 2."""
    script = identical_calls(mode, 2) + [mode.answer("done"), SYNTH]
    llm = mode.llm(script + script)
    deps = make_deps(llm, [echo_tool()])

    first = await run(llm, deps=deps, completion_check=False)
    n_first = len(llm.calls)
    second = await run(llm, deps=deps, completion_check=False)

    assert first.state.status == second.state.status == "succeeded"
    assert all(count_containing(c.messages, "identical arguments") == 0 for c in llm.calls[n_first:])


async def test_argument_key_order_does_not_matter_and_results_are_not_compared() -> None:
    """S40/S41: {a,b} ≡ {b,a}; the count grows even when the results differ."""
    from engine_kit import JSON, capture_tool, Recorder

    results = iter(["r1", "r2", "r3"])
    rec = Recorder()
    tool = capture_tool(rec, name="probe")
    tool.fn = lambda **kw: next(results)
    llm = JSON.llm([JSON.call("probe", {"a": 1, "b": 2}), JSON.call("probe", {"b": 2, "a": 1}),
                    JSON.call("probe", {"a": 1, "b": 2}), JSON.answer("done"), SYNTH])

    out = await run(llm, [tool], completion_check=False)

    assert count_containing(out.loop_calls()[-1].messages, warning_text("probe", 3)) == 1


async def test_failed_calls_count_for_cycle_detection() -> None:
    """S40: failed calls (tool exceptions) are counted too."""
    from engine_kit import JSON

    llm = JSON.llm([JSON.call("boom", {}) for _ in range(3)] + [JSON.answer("done"), SYNTH])

    out = await run(llm, [raising_tool(RuntimeError("x"))], completion_check=False)

    assert count_containing(out.loop_calls()[-1].messages, warning_text("boom", 3)) == 1


async def test_native_batches_count_in_call_order_and_warn_after_all_tool_messages() -> None:
    """S42: one batch with 3 identical calls + 1 other ⇒ warning after all 4 tool messages."""
    llm = ScriptedLLM([
        tool_calls(("c0", "echo", {"text": "s"}), ("c1", "echo", {"text": "s"}),
                   ("c2", "echo", {"text": "s"}), ("c3", "echo", {"text": "other"})),
        text("done"),
        SYNTH,
    ], abilities={"tool_call": True})

    out = await run(llm, [echo_tool()], completion_check=False)

    tail = out.loop_calls()[1].messages[2:]
    assert [m.role for m in tail] == ["assistant", "tool", "tool", "tool", "tool", "user"]
    assert tail[-1].content == warning_text("echo", 3)


async def test_the_cycle_threshold_is_configurable() -> None:
    """S41: REACT_CYCLE_DETECTION_THRESHOLD=2 ⇒ the warning comes at the 2nd identical call."""
    llm = NATIVE.llm(identical_calls(NATIVE, 2) + [NATIVE.answer("done"), SYNTH])

    out = await run(llm, [echo_tool()], config=EngineConfig(REACTQ_CYCLE_DETECTION_THRESHOLD=2),
                    completion_check=False)

    assert count_containing(out.loop_calls()[-1].messages, warning_text("echo", 2)) == 1


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_warnings_and_self_checks_produce_no_events(mode: Mode) -> None:
    """S42/S79: the cycle warning and self-check are internal: no event mentions them."""
    llm = mode.llm(identical_calls(mode, 6) + [mode.answer("done"), SYNTH])

    out = await run(llm, [echo_tool()], max_iterations=15, completion_check=False)

    assert count_containing(out.loop_calls()[-1].messages, SELF_CHECK_HEAD) == 1
    for e in out.events:
        blob = str(e.data)
        assert "identical arguments" not in blob and SELF_CHECK_HEAD not in blob
