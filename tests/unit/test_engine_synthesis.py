"""Group H — answer synthesis and its fallback (SPEC S49–S52, S65, T-H1, T-H2)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from engine_kit import MODES, SYNTH, SYNTH_TEXT, Mode, echo_tool, raising_tool, run
from reactq.shared.engine.synthesis import fallback_chunks
from reactq.shared.llm.testing import Call, ScriptedLLM, final, text
from reactq.shared.models import ChatMessage, StreamChunk


def answer_deltas(out: Any) -> list[str]:
    return [d["content"] for d in out.of("answer", status="delta")]


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_long_tool_results_are_cut_to_2000_chars_in_the_synthesis_trace(mode: Mode) -> None:
    """S51, T-H1: a 5000 × "x" result ⇒ exactly 2000 "x" + "... (truncated)"; the call line is there."""
    big = "x" * 5000
    llm = mode.llm([mode.call("echo", {"text": big}), mode.answer("done"), SYNTH])

    out = await run(llm, [echo_tool()], completion_check=False)

    (synthesis,) = out.synthesis_calls()
    user = synthesis.messages[-1].text()
    assert f"Tool result: {'x' * 2000}... (truncated)" in user
    assert f"Tool result: {'x' * 2001}" not in user
    assert f'Tool call: echo({json.dumps({"text": big})})' in user
    # The step itself keeps the full result.
    assert out.state.steps[0].observation == big


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_the_synthesis_prompt_is_the_question_and_the_full_trace(mode: Mode) -> None:
    """S50/S51: system = synthesizer; user = "Question: …\\n\\nAgent execution trace:\\n…" with every call."""
    llm = mode.llm([mode.call("echo", {"text": "héllo"}), mode.call("boom", {}, call_id="c2"),
                    mode.answer("done"), SYNTH])

    out = await run(llm, [echo_tool(), raising_tool(RuntimeError("bad"))], query="Say hi",
                    completion_check=False)

    system, user = out.synthesis_calls()[0].messages
    assert system.role == "system" and "FIM One" in system.text() and "synthesizer" in system.text()
    assert "meta-commentary" in system.text() and "same language" in system.text()
    assert user.role == "user"
    assert user.text().startswith("Question: Say hi\n\nAgent execution trace:\n")
    trace = user.text().split("Agent execution trace:\n", 1)[1]
    lines = trace.splitlines()
    assert 'Tool call: echo({"text": "héllo"})' in lines  # non-ASCII kept
    assert "Tool result: héllo" in lines
    assert "Tool call: boom({})" in lines
    assert "Tool result: Error: RuntimeError: bad" in lines
    assert lines.index("Tool call: boom({})") > lines.index("Tool result: héllo")


async def test_a_run_without_tool_calls_has_an_empty_trace_marker() -> None:
    """S51: no tool calls ⇒ "(no tool calls)" in the trace."""
    llm = ScriptedLLM([final("hi"), SYNTH])

    out = await run(llm, [])

    assert "(no tool calls)" in out.synthesis_calls()[0].messages[-1].text()


async def test_native_assistant_text_beside_tool_calls_is_in_the_trace() -> None:
    """S51: assistant text appears as "Assistant reasoning: <content>"."""
    from reactq.shared.llm.testing import tool_calls

    llm = ScriptedLLM([tool_calls(("c1", "echo", {"text": "d"}), content="Let me look."), text("ok"), SYNTH],
                      abilities={"tool_call": True})

    out = await run(llm, [echo_tool()])

    assert "Assistant reasoning: Let me look." in out.synthesis_calls()[0].messages[-1].text()


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_the_synthesis_streams_deltas_and_done_carries_the_streamed_text(mode: Mode) -> None:
    """S49/S52: one stream_chat call; answer start, deltas, done; done.answer = the streamed text."""
    llm = mode.llm([mode.answer("brief"), text("The long and polished answer.")])

    out = await run(llm, [])

    assert [c.stream for c in llm.calls] == [False, True]
    assert "".join(answer_deltas(out)) == "The long and polished answer."
    assert len(answer_deltas(out)) > 1
    assert out.done["answer"] == "The long and polished answer."
    assert out.state.final_answer == "The long and polished answer."
    assert out.answer == "brief"  # the loop's own answer is kept apart


class BrokenStreamLLM(ScriptedLLM):
    """A scripted LLM whose stream yields ``before`` chunks, then raises."""

    def __init__(self, replies: list[Any], *, before: list[str], **kw: Any) -> None:
        super().__init__(replies, **kw)
        self.before = before

    async def stream_chat(self, messages: list[ChatMessage], **kwargs: Any) -> AsyncIterator[StreamChunk]:
        self.calls.append(Call(list(messages), dict(kwargs), True))
        for piece in self.before:
            yield StreamChunk(delta_content=piece)
        raise ConnectionError("stream broke")


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_a_stream_that_raises_at_once_falls_back_to_the_loop_answer(mode: Mode) -> None:
    """S52/S65, T-H2: stream_chat raises ⇒ deltas join to the loop's answer; done.answer equals it."""
    loop_answer = "The loop's own answer, which is long enough to need several chunks."
    llm = mode.llm([mode.answer(loop_answer), ConnectionError("no stream")])

    out = await run(llm, [], allow_fallback=True)

    assert "".join(answer_deltas(out)) == loop_answer
    assert len(answer_deltas(out)) > 1
    assert out.done["answer"] == loop_answer
    assert out.state.status == "succeeded"
    (err,) = out.of("error")
    assert err["kind"] == "synthesis_fallback"
    assert "ConnectionError: no stream" in err["message"]
    assert [(e.channel, e.data.get("status")) for e in out.events[-2:]] == [
        ("answer", "done"), ("done", "succeeded")]


async def test_deltas_already_sent_stay_sent_before_the_fallback() -> None:
    """S52: a stream that breaks mid-way keeps its deltas; the loop's answer follows; done = loop answer."""
    llm = BrokenStreamLLM([final("loop answer")], before=["Part", "ial "])

    out = await run(llm, [], allow_fallback=True)

    deltas = answer_deltas(out)
    assert deltas[:2] == ["Part", "ial "]
    assert "".join(deltas[2:]) == "loop answer"
    assert out.done["answer"] == "loop answer"
    kinds = [e.channel for e in out.events]
    assert kinds.index("error") > kinds.index("answer")


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_an_empty_stream_falls_back_to_the_loop_answer(mode: Mode) -> None:
    """S52: a synthesis that yields no text ⇒ fallback to the loop's answer (error kind synthesis_fallback)."""
    llm = mode.llm([mode.answer("loop answer"), text("")])

    out = await run(llm, [], allow_fallback=True)

    assert "".join(answer_deltas(out)) == "loop answer"
    assert out.done["answer"] == "loop answer"
    assert [e["kind"] for e in out.of("error")] == ["synthesis_fallback"]


def test_fallback_chunks_are_about_30_chars_on_word_boundaries() -> None:
    """S52: the fallback answer goes out as ~30-char chunks split at word boundaries."""
    sentence = "The quick brown fox jumps over the lazy dog and keeps on running far away."
    chunks = fallback_chunks(sentence)

    assert "".join(chunks) == sentence
    assert len(chunks) >= 3
    assert all(len(c) <= 30 for c in chunks)
    assert all(c.endswith(" ") for c in chunks[:-1])  # every split is at a word boundary
    assert fallback_chunks("") == []


async def test_synthesis_usage_is_part_of_the_run_usage() -> None:
    """S18/S78: done.usage is everything the run was billed for, the synthesis included."""
    llm = ScriptedLLM([final("a", usage={"prompt_tokens": 3, "completion_tokens": 2}),
                       text(SYNTH_TEXT, usage={"prompt_tokens": 100, "completion_tokens": 100})])

    out = await run(llm, [])

    assert out.done["usage"]["total_tokens"] == 205


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_the_runs_extra_instructions_reach_the_synthesizer_as_the_agent_directive(mode: Mode) -> None:
    """S50: the agent's directive (the run's extra instructions) ⇒ "## Agent Directive\\n<text>"."""
    llm = mode.llm([mode.answer("ok"), SYNTH])

    out = await run(llm, [], system_prompt="Always answer in French.")

    system = out.synthesis_calls()[0].messages[0].text()
    assert "## Agent Directive\nAlways answer in French." in system


async def test_no_agent_directive_section_without_extra_instructions() -> None:
    """S50: no directive ⇒ no "## Agent Directive" section."""
    llm = ScriptedLLM([final("ok"), SYNTH])

    out = await run(llm, [])

    assert "## Agent Directive" not in out.synthesis_calls()[0].messages[0].text()


def test_a_language_directive_is_appended_as_a_bullet() -> None:
    """S50: language_directive ⇒ "- <directive>" appended to the system prompt."""
    from reactq.shared.engine.state import RunState
    from reactq.shared.engine.synthesis import synthesis_messages

    state = RunState(run_id="r", query="q", model="m", mode="json", max_iterations=3)
    system = synthesis_messages(state, language_directive="Answer in Korean.")[0].text()

    assert system.endswith("\n- Answer in Korean.")


def test_a_synthesis_a_cap_refused_says_budget_not_fallback() -> None:
    from reactq.shared.engine.ending import fallback_event
    from reactq.shared.engine.state import RunState
    from reactq.shared.errors import CostCapReached

    state = RunState(run_id="r1", query="q", model="m", mode="native", max_iterations=3)
    event = fallback_event(state, CostCapReached("tenant", 0.0071, 0.006))
    assert (event.data["kind"], event.data["cap"], event.data["cost_budget_usd"]) == ("budget", "tenant", 0.006)
    assert event.data["message"].startswith("The tenant's daily cost cap reached: $0.0071 of $0.0060 spent")
    assert fallback_event(state, "no text").data["kind"] == "synthesis_fallback"
