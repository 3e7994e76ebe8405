"""Group I — user messages sent while the run works (SPEC S53–S57, T-I1, T-I2)."""

from __future__ import annotations

import re

import pytest

from engine_kit import (
    CHECKLIST_HEAD,
    INTERRUPT_HEAD,
    JSON,
    MODES,
    NATIVE,
    SYNTH,
    Mode,
    count_containing,
    echo_tool,
    run,
)
from reactq.shared.events import Event, ListSink
from reactq.shared.inprocess import InterruptQueue
from reactq.shared.llm.testing import ScriptedLLM, final, text, tool_calls
from reactq.shared.models import ChatMessage
from reactq.shared.tools.base import Tool

from engine_kit import TextArgs


def one(content: str) -> str:
    return f"[USER INTERRUPT]: {content}\n\nAcknowledge and adjust if needed."


def queued(*contents: str) -> InterruptQueue:
    q = InterruptQueue()
    for c in contents:
        q.put(c)
    return q


def interrupt_messages(messages: list[ChatMessage]) -> list[ChatMessage]:
    return [m for m in messages if m.text().startswith(INTERRUPT_HEAD)]


async def test_a_json_final_answer_is_suppressed_by_a_waiting_interrupt() -> None:
    """S54/S55/S56, T-I1: queue "use metric units", [final A, final B] ⇒ answer B, 2 calls."""
    llm = ScriptedLLM([final("A"), final("B"), SYNTH])

    out = await run(llm, [], interrupts=queued("use metric units"))

    assert out.answer == "B"
    calls = out.loop_calls()
    assert len(calls) == 2
    second = calls[1].messages
    assert second[-2].role == "assistant" and '"answer": "A"' in second[-2].text()
    assert (second[-1].role, second[-1].content, second[-1].pinned) == (
        "user", one("use metric units"), True)
    # The suppressed answer fired no answer signal (S56/S79) and is not a step.
    assert len(out.of("step", type="answer", status="start")) == 1
    assert [s.answer for s in out.state.steps] == ["B"]


async def test_native_interrupts_wait_until_after_the_tool_messages() -> None:
    """S54, T-I2: native ⇒ …, assistant(tool_calls), tool(c1), user([USER INTERRUPT]…) in that order."""
    llm = ScriptedLLM([tool_calls(("c1", "echo", {"text": "x"})), text("done"), SYNTH],
                      abilities={"tool_call": True})

    out = await run(llm, [echo_tool()], interrupts=queued("also check y"))

    tail = out.loop_calls()[1].messages[2:]
    assert [m.role for m in tail] == ["assistant", "tool", "user"]
    assert tail[1].tool_call_id == "c1"
    assert (tail[2].content, tail[2].pinned) == (one("also check y"), True)
    assert out.answer == "done"


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_two_waiting_messages_become_one_combined_message_and_two_inject_events(mode: Mode) -> None:
    """S55, T-I2: two messages ⇒ one "The user sent 2 messages…" message, two inject events."""
    queue = queued("first thing", "second thing")
    llm = mode.llm([mode.call("echo", {"text": "x"}), mode.answer("done"), SYNTH])

    out = await run(llm, [echo_tool()], interrupts=queue)

    msgs = interrupt_messages(out.loop_calls()[1].messages)
    assert [m.content for m in msgs] == [
        "[USER INTERRUPT]: The user sent 2 messages while you were working:\n"
        "1. first thing\n2. second thing\n\n"
        "Acknowledge ALL of them and adjust your response if needed."
    ]
    assert msgs[0].pinned is True
    injects = out.of("inject")
    assert [(i["type"], i["content"]) for i in injects] == [("inject", "first thing"), ("inject", "second thing")]
    assert all(re.fullmatch(r"[0-9a-f]{12}", i["id"]) for i in injects)


async def test_json_drains_after_the_reply_and_before_the_tool_runs() -> None:
    """S9/S54: JSON tool turn ⇒ assistant → [USER INTERRUPT] → Observation."""
    llm = ScriptedLLM([JSON.call("echo", {"text": "x"}), final("ok"), SYNTH])

    out = await run(llm, [echo_tool()], interrupts=queued("note"))

    tail = out.loop_calls()[1].messages[2:]
    assert [m.role for m in tail] == ["assistant", "user", "user"]
    assert tail[1].content == one("note")
    assert tail[2].content == "Observation: x"
    # The inject event comes before the tool starts.
    order = [(e.channel, e.data.get("type"), e.data.get("status")) for e in out.events]
    assert order.index(("inject", "inject", None)) < order.index(("step", "iteration", "start"))


async def test_json_parse_retry_keeps_the_interrupt_for_the_next_turn() -> None:
    """S54/S56: the message waits through the retry turn and suppresses the next final answer."""
    llm = ScriptedLLM([text("not json"), final("A"), final("B"), SYNTH])

    out = await run(llm, [], interrupts=queued("hello"))

    assert out.answer == "B"
    second = out.loop_calls()[1].messages
    assert count_containing(second, INTERRUPT_HEAD) == 0
    assert second[-1].content.startswith("Your previous response was not valid JSON")
    third = out.loop_calls()[2].messages
    assert third[-1].content == one("hello")
    assert len(out.of("inject")) == 1


async def test_a_native_tool_turn_drains_messages_sent_while_tools_ran() -> None:
    """S54: native ⇒ a message that arrives during tool execution is drained after the tool messages."""
    queue = InterruptQueue()

    def slow(text: str) -> str:
        queue.put("while you work")
        return text

    tool = Tool(name="echo", description="Echo.", args_model=TextArgs, fn=slow)
    llm = ScriptedLLM([tool_calls(("c1", "echo", {"text": "x"})), text("done"), SYNTH],
                      abilities={"tool_call": True})

    out = await run(llm, [tool], interrupts=queue)

    tail = out.loop_calls()[1].messages[-2:]
    assert [m.role for m in tail] == ["tool", "user"]
    assert tail[1].content == one("while you work")


async def test_a_native_final_answer_turn_drains_right_after_the_assistant_message() -> None:
    """S54/S56: native no-tool turn ⇒ drain right after the assistant message; answer suppressed."""
    llm = ScriptedLLM([text("A"), text("B"), SYNTH], abilities={"tool_call": True})

    out = await run(llm, [], interrupts=queued("wait"))

    second = out.loop_calls()[1].messages
    assert [(m.role, m.text()) for m in second[-2:]] == [("assistant", "A"), ("user", one("wait"))]
    assert out.answer == "B"


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_on_the_last_turn_the_answer_is_accepted_despite_an_interrupt(mode: Mode) -> None:
    """S56: the answer is suppressed only when i < max_iterations."""
    llm = mode.llm([mode.answer("A"), SYNTH])

    out = await run(llm, [], interrupts=queued("late"), max_iterations=1)

    assert out.answer == "A"
    assert len(out.of("inject")) == 1


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_the_checklist_is_not_evaluated_on_a_suppressed_turn(mode: Mode) -> None:
    """S56/S44: a suppressed final answer does not consume the checklist; it fires on the next one."""
    queue = InterruptQueue()

    def put_on_third(text: str) -> str:
        if text == "c":
            queue.put("one more thing")
        return text

    tool = Tool(name="echo", description="Echo.", args_model=TextArgs, fn=put_on_third)
    script = [mode.call("echo", {"text": t}, call_id=f"c-{t}") for t in "abc"]
    if mode.native:
        # Native drains after the 3rd tool turn; the final answer of turn 4 is not suppressed.
        script += [mode.answer("first"), mode.answer("verify"), mode.answer("final")]
    else:
        # JSON drains at turn 4 (the final answer) ⇒ suppressed; turn 5's answer meets the checklist.
        script += [mode.answer("suppressed"), mode.answer("first"), mode.answer("verify"), mode.answer("final")]
    llm = mode.llm(script + [SYNTH])

    out = await run(llm, [tool], interrupts=queue, max_iterations=20)

    assert out.answer == "final"
    assert count_containing(out.state.messages, CHECKLIST_HEAD) == 1
    assert count_containing(out.state.messages, INTERRUPT_HEAD) == 1


async def test_a_recalled_message_is_never_drained() -> None:
    """S53: a queued message recalled by id before the drain is dropped; the others stay FIFO."""
    queue = InterruptQueue()
    keep_1 = queue.put("keep 1")
    dropped = queue.put("drop me")
    queue.put("keep 2")
    assert re.fullmatch(r"[0-9a-f]{12}", keep_1)
    assert queue.recall(dropped) is True
    assert queue.recall(dropped) is False
    llm = ScriptedLLM([final("A"), final("B"), SYNTH])

    out = await run(llm, [], interrupts=queue)

    assert [i["content"] for i in out.of("inject")] == ["keep 1", "keep 2"]
    (msg,) = interrupt_messages(out.loop_calls()[1].messages)
    assert "drop me" not in msg.text() and "1. keep 1\n2. keep 2" in msg.text()


class PutOnAnswerSink(ListSink):
    """Queues a message as soon as the loop signals its answer (i.e. after the last drain)."""

    def __init__(self, queue: InterruptQueue, content: str) -> None:
        super().__init__()
        self.queue, self.content = queue, content

    async def emit(self, events: list[Event]) -> None:
        await super().emit(events)
        if any(e.channel == "step" and e.data.get("type") == "answer" for e in events):
            self.queue.put(self.content)


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_messages_left_after_the_loop_go_to_done_pending_injections(mode: Mode) -> None:
    """S57: leftovers after the last drain ⇒ done.pending_injections, no inject event."""
    queue = InterruptQueue()
    llm = mode.llm([mode.answer("A"), SYNTH])

    out = await run(llm, [], interrupts=queue, sink=PutOnAnswerSink(queue, "too late"))

    assert out.done["pending_injections"] == ["too late"]
    assert out.of("inject") == []
    assert out.answer == "A"


async def test_done_has_no_pending_injections_when_everything_was_drained() -> None:
    """S57: nothing left over ⇒ no pending_injections field."""
    llm = ScriptedLLM([final("A"), final("B"), SYNTH])

    out = await run(llm, [], interrupts=queued("x"))

    assert "pending_injections" not in out.done


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_interrupts_do_not_count_as_tool_calls(mode: Mode) -> None:
    """S17: interrupt injections never count toward tool_call_count."""
    llm = mode.llm([mode.answer("A"), mode.call("echo", {"text": "x"}), mode.answer("B"), SYNTH])

    out = await run(llm, [echo_tool()], interrupts=queued("x"))

    assert out.state.tool_call_count == 1


async def test_an_interrupt_is_taken_once_even_across_turns() -> None:
    """S53/S55: a drained message is never drained again."""
    llm = NATIVE.llm([NATIVE.call("echo", {"text": "1"}), NATIVE.call("echo", {"text": "2"}, call_id="c2"),
                      NATIVE.answer("ok"), SYNTH])

    out = await run(llm, [echo_tool()], interrupts=queued("once"), completion_check=False)

    assert len(out.of("inject")) == 1
    assert count_containing(out.loop_calls()[-1].messages, INTERRUPT_HEAD) == 1
