"""Group A — the loop and its two modes (SPEC S2–S18, T-A1…T-A6), through ``run_local``."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from engine_kit import (
    JSON,
    MODES,
    NATIVE,
    SYNTH,
    Mode,
    Recorder,
    add_tool,
    echo_tool,
    raising_tool,
    run,
)
from reactq.shared.engine import prompts
from reactq.shared.llm.testing import ScriptedLLM, final, text, tool_calls, tool_json

# --------------------------------------------------------------------------- T-A1 … T-A6


async def test_a_json_final_answer_with_no_tools_ends_the_run_in_one_turn() -> None:
    """S14, T-A1: JSON, [final "hello world"], no tools ⇒ answer, 1 iteration, 1 final step."""
    llm = ScriptedLLM([final("hello world"), SYNTH])

    out = await run(llm)

    assert out.answer == "hello world"
    assert out.done["iterations"] == 1
    assert [s.type for s in out.state.steps] == ["final_answer"]
    assert out.state.steps[0].answer == "hello world"
    assert out.state.status == "succeeded"


async def test_a_json_tool_call_then_final_answer_records_both_steps() -> None:
    """S9, S14, T-A2: [echo ping, final pong] ⇒ answer pong, 2 iterations, steps[0] = ping."""
    llm = ScriptedLLM([tool_json("echo", {"text": "ping"}), final("pong"), SYNTH])

    out = await run(llm, [echo_tool()], completion_check=False)

    assert out.answer == "pong"
    assert out.done["iterations"] == 2
    first, second = out.state.steps
    assert (first.type, first.tool_name, first.observation, first.error) == ("tool_call", "echo", "ping", None)
    assert second.type == "final_answer"


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_the_run_stops_at_max_iterations_with_a_summary_of_every_step(mode: Mode) -> None:
    """S16, T-A3: a script that always calls echo, max_iterations=3 ⇒ 3 iterations, 3 steps."""
    llm = mode.llm([mode.call("echo", {"text": "loop"})], repeat_last=True)

    # The repeated reply also serves the synthesis (a native one has no text ⇒ fallback).
    out = await run(llm, [echo_tool()], max_iterations=3, allow_fallback=True)

    assert out.done["iterations"] == 3
    assert len(out.state.steps) == 3
    assert all(s.type == "tool_call" for s in out.state.steps)
    assert "unable to complete" in out.answer
    assert len(out.loop_calls()) == 3


async def test_native_parallel_calls_reach_the_next_turn_as_tool_messages_in_call_order() -> None:
    """S11, S13, S14, T-A4: call-a echo aaa + call-b add 1+2 ⇒ tool messages aaa, 3 in order."""
    llm = ScriptedLLM([
        tool_calls(("call-a", "echo", {"text": "aaa"}), ("call-b", "add", {"a": 1, "b": 2})),
        text("done"),
        SYNTH,
    ], abilities={"tool_call": True})

    out = await run(llm, [echo_tool(), add_tool()], completion_check=False)

    second = out.loop_calls()[1].messages
    tool_msgs = [(m.tool_call_id, m.content) for m in second if m.role == "tool"]
    assert tool_msgs == [("call-a", "aaa"), ("call-b", "3")]
    assert [s.type for s in out.state.steps] == ["tool_call", "tool_call", "final_answer"]
    assert out.done["iterations"] == 2


async def test_native_events_follow_the_callback_sequence_of_a_two_call_batch() -> None:
    """S11, T-A5: thinking(1), two starts before either done, dones in call order, thinking(2), answer."""
    llm = ScriptedLLM([
        tool_calls(("c1", "echo", {"text": "a"}), ("c2", "echo", {"text": "b"})),
        text("final"),
        SYNTH,
    ], abilities={"tool_call": True})

    out = await run(llm, [echo_tool()], completion_check=False)

    steps = [(e.data.get("iteration"), e.data["type"], e.data["status"], e.data.get("observation"))
             for e in out.events if e.channel == "step"]
    assert steps == [
        (1, "thinking", "start", None),
        (1, "thinking", "done", None),
        (1, "iteration", "start", None),
        (1, "iteration", "start", None),
        (1, "iteration", "done", "a"),
        (1, "iteration", "done", "b"),
        (2, "thinking", "start", None),
        (2, "thinking", "done", None),
        (None, "answer", "start", None),
    ]


async def test_native_content_sent_with_tool_calls_is_not_a_final_answer() -> None:
    """S12, T-A6: content "Let me look that up." + tool_calls ⇒ the loop goes on to turn 2."""
    llm = ScriptedLLM([
        tool_calls(("c1", "echo", {"text": "data"}), content="Let me look that up."),
        text("Here is the result: data"),
        SYNTH,
    ], abilities={"tool_call": True})

    out = await run(llm, [echo_tool()])

    assert out.done["iterations"] == 2
    assert out.answer == "Here is the result: data"
    assert len(out.loop_calls()) == 2


async def test_native_mode_with_zero_tools_sends_no_tools_and_no_tool_choice() -> None:
    """S4, T-A6: with no tools registered the LLM receives tools=None and tool_choice=None."""
    llm = ScriptedLLM([text("hi"), SYNTH], abilities={"tool_call": True})

    out = await run(llm, [])

    kwargs = out.loop_calls()[0].kwargs
    assert kwargs.get("tools") is None
    assert kwargs.get("tool_choice") is None


# --------------------------------------------------------------------------- S2 mode selection


@pytest.mark.parametrize(
    ("abilities", "mode", "expected"),
    [
        ({"tool_call": True}, "auto", "native"),
        ({"tool_call": True}, "native", "native"),
        ({"tool_call": True}, "json", "json"),
        ({}, "auto", "json"),
        ({}, "native", "json"),
        ({"tool_call": False, "json_mode": True}, "auto", "json"),
    ],
)
async def test_native_mode_is_used_only_when_allowed_and_the_model_calls_tools(
    abilities: dict[str, bool], mode: str, expected: str
) -> None:
    """S2: native iff the request allows it and abilities["tool_call"]; else silently JSON."""
    reply = text("ok") if expected == "native" else final("ok")
    llm = ScriptedLLM([reply, SYNTH], abilities=abilities)

    out = await run(llm, [echo_tool()], mode=mode)

    assert out.state.mode == expected
    assert out.answer == "ok"


# --------------------------------------------------------------------------- S3–S5 prompts


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_the_first_messages_are_the_system_prompt_and_the_pinned_query(mode: Mode) -> None:
    """S3: [system, user(query, pinned=True)] (reactq runs have no memory history)."""
    llm = mode.llm([mode.answer("x"), SYNTH])

    out = await run(llm, [], query="What is 2+2?")

    first = out.loop_calls()[0].messages
    assert [m.role for m in first] == ["system", "user"]
    assert first[1].content == "What is 2+2?"
    assert first[1].pinned is True
    assert first[0].pinned is False


async def test_the_json_prompt_lists_every_tool_with_description_and_schema() -> None:
    """S4: JSON system prompt = name + description + JSON schema per tool + the two shapes."""
    llm = ScriptedLLM([final("x"), SYNTH])

    out = await run(llm, [echo_tool(), add_tool()])

    system = out.loop_calls()[0].messages[0].text()
    for tool in (echo_tool(), add_tool()):
        assert f"- {tool.name}: {tool.description}" in system
        assert json.dumps(tool.parameters(), ensure_ascii=False) in system
    assert '"type": "tool_call"' in system and '"tool_name"' in system and '"tool_args"' in system
    assert '"type": "final_answer"' in system and '"answer"' in system
    assert "tools" not in out.loop_calls()[0].kwargs or out.loop_calls()[0].kwargs["tools"] is None


async def test_the_json_prompt_says_no_tools_are_available_when_there_are_none() -> None:
    """S4: JSON mode with zero tools ⇒ "(no tools available)"."""
    llm = ScriptedLLM([final("x"), SYNTH])

    out = await run(llm, [])

    assert "(no tools available)" in out.loop_calls()[0].messages[0].text()


async def test_native_tools_go_in_the_tools_parameter_not_in_the_prompt() -> None:
    """S4: native ⇒ tools=[{"type":"function","function":{…}}], tool_choice="auto", no tool text."""
    llm = ScriptedLLM([text("x"), SYNTH], abilities={"tool_call": True})

    out = await run(llm, [echo_tool(), add_tool()])

    call = out.loop_calls()[0]
    assert call.kwargs["tool_choice"] == "auto"
    assert call.kwargs["tools"] == [echo_tool().openai_schema(), add_tool().openai_schema()]
    assert call.kwargs["tools"][0] == {
        "type": "function",
        "function": {"name": "echo", "description": "Echoes the input text back.",
                     "parameters": echo_tool().parameters()},
    }
    system = call.messages[0].text()
    assert "Echoes the input text back." not in system
    assert "(no tools available)" not in system


@pytest.mark.parametrize(("abilities", "expected"), [({"json_mode": True}, {"type": "json_object"}),
                                                     ({}, None)])
async def test_json_mode_asks_for_a_json_object_only_from_models_that_support_it(
    abilities: dict[str, bool], expected: dict[str, str] | None
) -> None:
    """S7: response_format={"type":"json_object"} iff abilities["json_mode"]; loop uses chat()."""
    llm = ScriptedLLM([final("x"), SYNTH], abilities=abilities)

    out = await run(llm, [])

    assert out.loop_calls()[0].kwargs.get("response_format") == expected
    assert [c.stream for c in out.llm.calls] == [False, True]


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_extra_instructions_are_appended_after_the_default_prompt(mode: Mode) -> None:
    """S5: RunRequest.system_prompt (extra instructions) ⇒ default + "\\n\\nAdditional instructions:\\n…"."""
    llm = mode.llm([mode.answer("x"), SYNTH])

    out = await run(llm, [echo_tool()], system_prompt="Always answer in French.")

    system = out.loop_calls()[0].messages[0].text()
    assert system.endswith("\n\nAdditional instructions:\nAlways answer in French.")
    default = system[: -len("\n\nAdditional instructions:\nAlways answer in French.")]
    assert "You are a helpful AI assistant" in default


@pytest.mark.parametrize("mode", ["json", "native"])
def test_default_prompts_carry_a_date_line_with_the_current_year(mode: str) -> None:
    """S5: a date/time line (UTC, current year) is appended to the default prompts."""
    now = dt.datetime(2031, 5, 6, 7, 8, tzinfo=dt.timezone.utc).timestamp()

    system = prompts.system_prompt(mode, [], now=now)

    assert "2031-05-06 07:08" in system
    assert "the current year is 2031" in system


def test_a_prompt_override_replaces_the_default_entirely() -> None:
    """S5: an override is the system prompt exactly (no tools, date or extra appended)."""
    system = prompts.system_prompt("json", [echo_tool().openai_schema()], now=0.0,
                                   override="You are terse.", extra="ignored")

    assert system == "You are terse."


# --------------------------------------------------------------------------- S9–S13 turns


async def test_a_json_tool_turn_appends_the_raw_reply_then_the_observation() -> None:
    """S9: JSON tool turn ⇒ assistant(raw reply) → user("Observation: <obs>")."""
    reply = tool_json("echo", {"text": "ping"})
    llm = ScriptedLLM([reply, final("pong"), SYNTH])

    out = await run(llm, [echo_tool()], completion_check=False)

    tail = out.loop_calls()[1].messages[2:]
    assert [(m.role, m.content) for m in tail] == [
        ("assistant", reply.message.content),
        ("user", "Observation: ping"),
    ]


async def test_json_mode_runs_one_tool_per_turn() -> None:
    """S9: each JSON turn executes exactly one tool call."""
    rec = Recorder()
    llm = ScriptedLLM([tool_json("echo", {"text": "1"}), tool_json("echo", {"text": "2"}),
                       final("ok"), SYNTH])

    out = await run(llm, [echo_tool(rec)], completion_check=False)

    assert rec.calls == [("echo", {"text": "1"}), ("echo", {"text": "2"})]
    assert [s.iteration for s in out.state.steps] == [1, 2, 3]


async def test_a_json_tool_error_reaches_the_llm_as_an_error_observation() -> None:
    """S9: a failed call ⇒ user("Observation: Error: <error>")."""
    llm = ScriptedLLM([tool_json("boom", {}), final("ok"), SYNTH])

    out = await run(llm, [raising_tool(ValueError("bad"))], completion_check=False)

    assert out.loop_calls()[1].messages[-1].content == "Observation: Error: ValueError: bad"


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_empty_tool_output_is_replaced_for_the_llm_only(mode: Mode) -> None:
    """S10: "" ⇒ the LLM sees "Tool '<name>' completed successfully with no output. …"; the step keeps ""."""
    llm = mode.llm([mode.call("echo", {"text": ""}), mode.answer("ok"), SYNTH])

    out = await run(llm, [echo_tool()], completion_check=False)

    expected = "Tool 'echo' completed successfully with no output. Do not retry with same arguments."
    seen = out.loop_calls()[1].messages[-1]
    assert seen.content == (expected if mode.native else f"Observation: {expected}")
    assert out.state.steps[0].observation == ""
    assert out.of("step", type="iteration", status="done")[0]["observation"] == ""


async def test_native_tool_messages_follow_the_assistant_message_with_nothing_between() -> None:
    """S11: assistant(tool_calls) is appended first, then one tool message per call, in call order."""
    llm = ScriptedLLM([
        tool_calls(("c1", "echo", {"text": "x"}), ("c2", "echo", {"text": "y"}), content="thinking"),
        text("ok"),
        SYNTH,
    ], abilities={"tool_call": True})

    out = await run(llm, [echo_tool()], completion_check=False)

    tail = out.loop_calls()[1].messages[2:]
    assert [m.role for m in tail] == ["assistant", "tool", "tool"]
    assert tail[0].content == "thinking"
    assert [c.id for c in tail[0].tool_calls or []] == ["c1", "c2"]
    assert [(m.tool_call_id, m.content) for m in tail[1:]] == [("c1", "x"), ("c2", "y")]


async def test_native_calls_of_one_turn_run_concurrently() -> None:
    """S11: the calls of a native batch run at the same time (asyncio.gather)."""
    import asyncio

    from engine_kit import AnyArgs
    from reactq.shared.tools.base import Tool

    both_started = asyncio.Event()
    started = 0

    async def waiter() -> str:
        nonlocal started
        started += 1
        if started == 2:
            both_started.set()
        await asyncio.wait_for(both_started.wait(), timeout=2)
        return "ok"

    tool = Tool(name="wait", description="Waits for its twin.", args_model=AnyArgs, fn=waiter)
    llm = ScriptedLLM([tool_calls(("c1", "wait", {}), ("c2", "wait", {})), text("ok"), SYNTH],
                      abilities={"tool_call": True})

    out = await run(llm, [tool], completion_check=False)

    assert [s.observation for s in out.state.steps[:2]] == ["ok", "ok"]


async def test_native_tool_errors_reach_the_llm_as_error_prefixed_tool_messages() -> None:
    """S13: native tool message = observation, or "Error: <error>"."""
    llm = ScriptedLLM([tool_calls(("c1", "boom", {})), text("ok"), SYNTH], abilities={"tool_call": True})

    out = await run(llm, [raising_tool(RuntimeError("nope"))], completion_check=False)

    assert out.loop_calls()[1].messages[-1].content == "Error: RuntimeError: nope"


async def test_a_native_reply_without_content_or_tool_calls_is_an_empty_answer() -> None:
    """S12: a native turn with no tool_calls is final; content None ⇒ ""."""
    from reactq.shared.models import ChatMessage, LLMResult

    llm = ScriptedLLM([LLMResult(message=ChatMessage(role="assistant", content=None)), SYNTH],
                      abilities={"tool_call": True})

    out = await run(llm, [echo_tool()])

    assert out.answer == ""
    assert out.done["iterations"] == 1


# --------------------------------------------------------------------------- S14 steps


async def test_steps_hold_executed_failed_and_blocked_calls_then_one_final_step() -> None:
    """S14: one step per executed/failed/blocked call in execution order, + exactly one final."""
    from engine_kit import pre_hook
    from reactq.shared.hooks import HookResult

    blocker = pre_hook(lambda ctx: HookResult(allow=False, error="no"), tool_filter="add")
    llm = ScriptedLLM([
        tool_calls(("c1", "echo", {"text": "a"}), ("c2", "boom", {}), ("c3", "add", {"a": 1, "b": 1})),
        tool_calls(("c4", "missing", {})),
        text("fin"),
        SYNTH,
    ], abilities={"tool_call": True})

    out = await run(llm, [echo_tool(), raising_tool(KeyError("k")), add_tool()], hooks=[blocker],
                    completion_check=False)

    summary = [(s.type, s.tool_name, s.iteration, s.error is None) for s in out.state.steps]
    assert summary == [
        ("tool_call", "echo", 1, True),
        ("tool_call", "boom", 1, False),
        ("tool_call", "add", 1, False),
        ("tool_call", "missing", 2, False),
        ("final_answer", None, 3, True),
    ]
    assert out.done["iterations"] == 3


# --------------------------------------------------------------------------- S16 max iterations


async def test_the_max_iteration_answer_has_the_exact_summary_text() -> None:
    """S16: "I was unable … within N iterations.  Here is …:\\n" + "  Step k: called t -> OK|ERROR: e"."""
    llm = ScriptedLLM([tool_json("echo", {"text": "a"}), tool_json("boom", {})], repeat_last=True)

    out = await run(llm, [echo_tool(), raising_tool(RuntimeError("x"))], max_iterations=3)

    assert out.answer == (
        "I was unable to complete the task within 3 iterations.  Here is what I gathered so far:\n"
        "  Step 1: called echo -> OK\n"
        "  Step 2: called boom -> ERROR: RuntimeError: x\n"
        "  Step 3: called boom -> ERROR: RuntimeError: x"
    )
    assert out.done["iterations"] == 3
    # No final answer was accepted: no final_answer step.
    assert all(s.type == "tool_call" for s in out.state.steps)


async def test_a_one_turn_budget_ends_with_the_summary_of_that_turn() -> None:
    """S16: max_iterations=1 and a tool call ⇒ the summary of that single step."""
    llm = ScriptedLLM([tool_json("echo", {"text": "a"})], repeat_last=True)

    out = await run(llm, [echo_tool()], max_iterations=1)

    assert out.answer == (
        "I was unable to complete the task within 1 iterations.  Here is what I gathered so far:\n"
        "  Step 1: called echo -> OK"
    )


def test_the_step_summary_says_no_steps_taken_when_there_were_none() -> None:
    """S16: an empty step list summarises as "(no steps taken)"; a final step as "final answer"."""
    from reactq.shared.engine.result import step_summary
    from reactq.shared.engine.state import RunState, StepRecord

    state = RunState(run_id="r", query="q", model="m", mode="json", max_iterations=1)
    assert step_summary(state) == "(no steps taken)"
    state.steps.append(StepRecord(type="final_answer", iteration=1, answer="x"))
    assert step_summary(state) == "  Step 1: final answer"


# --------------------------------------------------------------------------- S17, S18


async def test_json_mode_counts_every_tool_call() -> None:
    """S17: JSON ⇒ +1 per executed, failed or blocked call; parse retries never count."""
    llm = ScriptedLLM([tool_json("echo", {"text": "a"}), text("garbage"), tool_json("boom", {}),
                       tool_json("missing", {}), final("ok"), SYNTH])

    out = await run(llm, [echo_tool(), raising_tool(RuntimeError("x"))], completion_check=False)

    assert out.state.tool_call_count == 3


async def test_native_mode_counts_turns_with_tool_calls_not_calls() -> None:
    """S17: native ⇒ +1 per turn that had ≥ 1 tool call."""
    llm = ScriptedLLM([
        tool_calls(("c1", "echo", {"text": "a"}), ("c2", "echo", {"text": "b"})),
        tool_calls(("c3", "echo", {"text": "c"})),
        text("ok"),
        SYNTH,
    ], abilities={"tool_call": True})

    out = await run(llm, [echo_tool()], completion_check=False)

    assert out.state.tool_call_count == 2


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_usage_sums_every_call_the_synthesis_included(mode: Mode) -> None:
    """S18: usage = sum of every billed call's usage (the synthesis too); llm_calls counts
    calls that reported usage."""
    llm = mode.llm([
        mode.call("echo", {"text": "a"}, usage={"prompt_tokens": 10, "completion_tokens": 5,
                                                "total_tokens": 15}),
        mode.call("echo", {"text": "b"}, call_id="c2"),  # no usage reported
        mode.answer("ok", usage={"prompt_tokens": 20, "completion_tokens": 7}),
        text("synth", usage={"prompt_tokens": 1000, "completion_tokens": 1000}),
    ])

    out = await run(llm, [echo_tool()], completion_check=False)

    usage = out.state.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (1030, 1012, 2042)
    assert usage.llm_calls == 3
    assert out.done["usage"]["prompt_tokens"] == 1030
    assert out.done["usage"]["completion_tokens"] == 1012
    assert out.done["usage"]["total_tokens"] == 2042


async def test_usage_sums_cache_counters_too() -> None:
    """S18: prompt-cache read/creation tokens are summed like the others."""
    u = {"prompt_tokens": 1, "completion_tokens": 1, "cache_read_input_tokens": 3,
         "cache_creation_input_tokens": 4}
    llm = ScriptedLLM([tool_json("echo", {"text": "a"}, usage=u), final("ok", usage=u), SYNTH])

    out = await run(llm, [echo_tool()], completion_check=False)

    assert out.state.usage.cache_read_input_tokens == 6
    assert out.state.usage.cache_creation_input_tokens == 8


async def test_iterations_is_the_index_of_the_accepting_turn() -> None:
    """S14: iterations = the turn whose answer was accepted."""
    llm = ScriptedLLM([tool_json("echo", {"text": "a"}), tool_json("echo", {"text": "b"}),
                       final("done"), SYNTH])

    out = await run(llm, [echo_tool()], completion_check=False)

    assert out.done["iterations"] == 3
    assert out.state.steps[-1].iteration == 3


@pytest.mark.parametrize("mode", [JSON, NATIVE], ids=str)
async def test_the_final_answer_signal_fires_once_for_the_accepted_answer(mode: Mode) -> None:
    """S15: the answer signal (step answer start) fires exactly once per run."""
    llm = mode.llm([mode.call("echo", {"text": "a"}), mode.answer("ok"), SYNTH])

    out = await run(llm, [echo_tool()], completion_check=False)

    assert len(out.of("step", type="answer", status="start")) == 1
    assert len(llm.calls) == 3


# --------------------------------------------------------------------------- call ids


async def test_duplicate_or_empty_native_call_ids_still_run_every_call() -> None:
    """S11/S14: every call of a batch runs with its own arguments, even when the provider
    repeats an id or sends none; each gets a unique id that pairs its tool message."""
    rec = Recorder()
    llm = ScriptedLLM([
        tool_calls(("c1", "echo", {"text": "a"}), ("c1", "echo", {"text": "b"}),
                   ("", "echo", {"text": "c"}), ("", "echo", {"text": "d"})),
        text("ok"),
        SYNTH,
    ], abilities={"tool_call": True})

    out = await run(llm, [echo_tool(rec)], completion_check=False)

    assert rec.calls == [("echo", {"text": t}) for t in "abcd"]
    tool_steps = out.state.steps[:4]
    assert [s.observation for s in tool_steps] == ["a", "b", "c", "d"]
    ids = [s.tool_call_id for s in tool_steps]
    assert ids[0] == "c1" and len(set(ids)) == 4 and all(ids)
    second = out.loop_calls()[1].messages
    assistant = second[2]
    assert [c.id for c in assistant.tool_calls or []] == ids
    assert [(m.tool_call_id, m.content) for m in second[3:]] == list(zip(ids, "abcd", strict=False))


async def test_a_call_id_reused_in_a_later_turn_gets_a_fresh_id() -> None:
    """S11: call ids are unique within a run (results and idempotency records key on them)."""
    llm = ScriptedLLM([
        tool_calls(("call_0", "echo", {"text": "a"})),
        tool_calls(("call_0", "echo", {"text": "b"})),
        text("ok"),
        SYNTH,
    ], abilities={"tool_call": True})

    out = await run(llm, [echo_tool()], completion_check=False)

    ids = [s.tool_call_id for s in out.state.steps[:2]]
    assert ids[0] == "call_0" and ids[1] != "call_0"
    assert [s.observation for s in out.state.steps[:2]] == ["a", "b"]


# --------------------------------------------------------------------------- selection (S29–S35)


async def test_one_tool_needs_no_selection_call() -> None:
    """S29, T-C1: 1 tool, [final "hello"] ⇒ exactly 1 LLM call in the loop, no phase event."""
    llm = ScriptedLLM([final("hello"), SYNTH])

    out = await run(llm, [echo_tool()])

    assert len(out.loop_calls()) == 1
    assert out.of("phase") == []


async def test_a_failed_selection_falls_back_to_every_tool() -> None:
    """S33, T-C3: 13 tools, plain LLM ["not json", "still not json", final] ⇒ 3 calls, full registry."""
    from engine_kit import stub_tools

    llm = ScriptedLLM([text("not json"), text("still not json"), final("fallback"), SYNTH])

    out = await run(llm, stub_tools(13), query="zzz qqq")

    assert out.answer == "fallback"
    assert len(out.loop_calls()) == 3
    assert out.state.tool_names == [f"tool_{i}" for i in range(13)]
    system = out.loop_calls()[2].messages[0].text()
    assert all(f"- tool_{i}:" in system for i in range(13))


async def test_the_selected_tools_drive_the_native_tools_payload() -> None:
    """S35, T-C2: the selection's tools (registration order) are the loop's tools payload."""
    from engine_kit import stub_tools

    llm = ScriptedLLM([tool_calls(("s", "select_tools", {"tools": ["tool_3", "tool_1"]})), text("done"), SYNTH],
                      abilities={"tool_call": True})

    out = await run(llm, stub_tools(13), query="zzz qqq")

    assert len(out.loop_calls()) == 2
    names = [t["function"]["name"] for t in out.loop_calls()[1].kwargs["tools"]]
    assert names == ["tool_1", "tool_3"]
