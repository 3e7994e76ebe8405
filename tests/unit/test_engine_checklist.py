"""Group G — the one-time completion checklist, seed semantics (SPEC S43–S47, T-G1…T-G3).

The seed is normative here (⚠D3/⚠D4): the verification reply is consumed and the answer
is asked for again; the checklist needs two spare turns.
"""

from __future__ import annotations

import pytest

from engine_kit import (
    CHECKLIST_HEAD,
    MODES,
    SYNTH,
    Mode,
    count_containing,
    echo_tool,
    run,
)
from reactq.shared.engine import prompts
from reactq.shared.events import Event, ListSink
from reactq.shared.inprocess import InterruptQueue
from reactq.shared.settings import EngineConfig

CHECKLIST = (
    "Before finalizing your answer, verify:\n"
    "1. Does your answer fully address the original question?\n"
    "2. Did you verify key facts from tool results?\n"
    "3. Are there any contradictions in the information gathered?\n"
    "If everything checks out, proceed with your final answer. If not, continue investigating."
)


def three_calls(mode: Mode) -> list:
    return [mode.call("echo", {"text": t}, call_id=f"c-{t}") for t in ("a", "b", "c")]


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_the_verification_reply_is_consumed_and_the_answer_asked_again(mode: Mode) -> None:
    """S44/S46, T-G1: [a, b, c, final "first attempt", final "verification ✓", final "verified answer"]."""
    llm = mode.llm(three_calls(mode) + [mode.answer("first attempt"), mode.answer("verification ✓"),
                                        mode.answer("verified answer"), SYNTH])

    out = await run(llm, [echo_tool()], max_iterations=20)

    assert out.answer == "verified answer"
    calls = out.loop_calls()
    assert len(calls) == 6
    assert count_containing(calls[4].messages, CHECKLIST_HEAD) == 1
    assert calls[4].messages[-1].content == CHECKLIST
    assert calls[4].messages[-1].role == "user"
    reask = calls[5].messages[-1]
    assert reask.role == "user"
    assert reask.content == prompts.ANSWER_REASK.format(query="What is going on?")
    # Only the accepted answer is a step and fires the answer signal.
    assert [s.answer for s in out.state.steps if s.type == "final_answer"] == ["verified answer"]
    assert len(out.of("step", type="answer", status="start")) == 1
    assert out.done["iterations"] == 6


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_one_tool_call_or_no_tools_never_trigger_the_checklist(mode: Mode) -> None:
    """S45, T-G2: 1 tool call then final ⇒ 2 calls; no tools ⇒ 1 call; no checklist."""
    llm = mode.llm([mode.call("echo", {"text": "a"}), mode.answer("done"), SYNTH])
    out = await run(llm, [echo_tool()])
    assert len(out.loop_calls()) == 2 and out.answer == "done"
    assert count_containing(out.state.messages, CHECKLIST_HEAD) == 0

    llm = mode.llm([mode.answer("hello"), SYNTH])
    out = await run(llm, [echo_tool()])
    assert len(out.loop_calls()) == 1 and out.answer == "hello"


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_the_checklist_can_be_turned_off(mode: Mode) -> None:
    """S43, T-G2: completion_check=False with 3 tools ⇒ 4 calls, no checklist."""
    llm = mode.llm(three_calls(mode) + [mode.answer("done"), SYNTH])

    out = await run(llm, [echo_tool()], completion_check=False)

    assert len(out.loop_calls()) == 4
    assert out.answer == "done"
    assert all(count_containing(c.messages, CHECKLIST_HEAD) == 0 for c in out.llm.calls)


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_investigating_after_the_checklist_resumes_the_loop_and_the_later_answer_wins(mode: Mode) -> None:
    """S46, T-G3: [a, b, c, final "first", echo "more", final "after investigation"] ⇒ that answer."""
    llm = mode.llm(three_calls(mode) + [
        mode.answer("first"),
        mode.call("echo", {"text": "more"}, call_id="c-more"),
        mode.answer("after investigation"),
        SYNTH,
    ])

    out = await run(llm, [echo_tool()], max_iterations=20)

    assert out.answer == "after investigation"
    calls = out.loop_calls()
    assert len(calls) == 6
    assert count_containing(calls[4].messages, CHECKLIST_HEAD) == 1
    assert count_containing(calls[5].messages, CHECKLIST_HEAD) == 1  # it stays in history
    assert count_containing(calls[5].messages, "user-facing final answer") == 0  # no re-ask


@pytest.mark.parametrize(("max_iterations", "fires"), [(5, False), (6, True)])
async def test_the_checklist_needs_two_spare_turns(max_iterations: int, fires: bool) -> None:
    """S44/S45, T-G3: 3 tools then final at turn 4: max 5 ⇒ accepted at once; max 6 ⇒ checklist."""
    from engine_kit import JSON

    script = three_calls(JSON) + [JSON.answer("first")]
    if fires:
        script += [JSON.answer("verification"), JSON.answer("final")]
    llm = JSON.llm(script + [SYNTH])

    out = await run(llm, [echo_tool()], max_iterations=max_iterations)

    if fires:
        assert (out.answer, len(out.loop_calls())) == ("final", 6)
        assert count_containing(out.state.messages, CHECKLIST_HEAD) == 1
    else:
        assert (out.answer, len(out.loop_calls())) == ("first", 4)
        assert count_containing(out.state.messages, CHECKLIST_HEAD) == 0


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_the_checklist_fires_at_most_once_per_run(mode: Mode) -> None:
    """S45: after a checklist round that resumed tools, the next final answer is accepted as-is."""
    llm = mode.llm(three_calls(mode) + [
        mode.answer("first"),
        mode.call("echo", {"text": "d"}, call_id="c-d"),
        mode.call("echo", {"text": "e"}, call_id="c-e"),
        mode.call("echo", {"text": "f"}, call_id="c-f"),
        mode.answer("second"),
        SYNTH,
    ])

    out = await run(llm, [echo_tool()], max_iterations=20)

    assert out.answer == "second"
    assert count_containing(out.state.messages, CHECKLIST_HEAD) == 1


async def test_the_minimum_tool_count_is_configurable() -> None:
    """S44: REACT_COMPLETION_CHECK_MIN_TOOLS=1 ⇒ always on after one tool call."""
    from engine_kit import JSON

    llm = JSON.llm([JSON.call("echo", {"text": "a"}), JSON.answer("first"), JSON.answer("check"),
                    JSON.answer("final"), SYNTH])

    out = await run(llm, [echo_tool()], config=EngineConfig(REACTQ_COMPLETION_CHECK_MIN_TOOLS=1))

    assert out.answer == "final"
    assert len(out.loop_calls()) == 4


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_checklist_text_and_the_verification_reply_never_reach_the_synthesis(mode: Mode) -> None:
    """S47/S79: the synthesis messages hold neither the checklist nor the verification reply."""
    llm = mode.llm(three_calls(mode) + [mode.answer("first attempt"),
                                        mode.answer("Let me verify: 1. ... ✓"),
                                        mode.answer("verified answer"), SYNTH])

    out = await run(llm, [echo_tool()], max_iterations=20)

    (synthesis,) = out.synthesis_calls()
    blob = "\n".join(m.text() for m in synthesis.messages)
    assert CHECKLIST_HEAD not in blob
    assert "Let me verify" not in blob
    assert "user-facing final answer" not in blob
    assert "verified answer" in blob  # the accepted draft is there
    # No event carries the checklist either (S79).
    assert all(CHECKLIST_HEAD not in str(e.data) and "Let me verify" not in str(e.data)
               for e in out.events)


class PutAtTurnSink(ListSink):
    """Queues a user message when turn ``turn`` starts (before its LLM call)."""

    def __init__(self, queue: InterruptQueue, turn: int, content: str) -> None:
        super().__init__()
        self.queue, self.turn, self.content = queue, turn, content

    async def emit(self, events: list[Event]) -> None:
        await super().emit(events)
        for e in events:
            if (e.channel, e.data.get("type"), e.data.get("status")) == ("step", "thinking", "start") \
                    and e.data["iteration"] == self.turn:
                self.queue.put(self.content)


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_when_no_turn_is_left_to_ask_again_the_pre_checklist_answer_stands(mode: Mode) -> None:
    """S45/S46/S56: the checklist never costs the run its answer. An interrupt suppresses the
    verification turn, so the consumed reply lands on the last turn: the candidate from
    before the checklist is accepted instead of the max-iterations summary."""
    queue = InterruptQueue()
    llm = mode.llm(three_calls(mode) + [mode.answer("first"), mode.answer("verifying"),
                                        mode.answer("verified"), SYNTH])

    out = await run(llm, [echo_tool()], max_iterations=6, interrupts=queue,
                    sink=PutAtTurnSink(queue, 5, "also mention units"))

    assert len(out.loop_calls()) == 6
    assert out.answer == "first"
    assert len(out.of("inject")) == 1


async def test_a_prose_verification_reply_does_not_end_in_the_max_iteration_summary() -> None:
    """S45/S46/S60: JSON verification reply in prose ⇒ reformat retry; with no turn left to
    ask again, the answer given before the checklist is accepted."""
    from engine_kit import JSON
    from reactq.shared.llm.testing import text

    llm = JSON.llm(three_calls(JSON) + [JSON.answer("first"), text("Let me verify: all good"),
                                        JSON.answer("verified ✓"), SYNTH])

    out = await run(llm, [echo_tool()], max_iterations=6)

    assert len(out.loop_calls()) == 6
    assert out.answer == "first"
    assert [s.answer for s in out.state.steps if s.type == "final_answer"] == ["first"]
