"""Group J — errors and fallbacks (SPEC S59–S62, S64, T-J1…T-J3), plus cancellation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine_kit import (
    JSON,
    MODES,
    NATIVE,
    SYNTH,
    AnyArgs,
    Mode,
    Recorder,
    add_tool,
    capture_tool,
    echo_tool,
    raising_tool,
    run,
    stub_tools,
)
from reactq.shared.engine import prompts
from reactq.shared.llm.testing import ScriptedLLM, final, text, tool_calls, tool_json
from reactq.shared.models import Artifact, ToolResult
from reactq.shared.tools.base import Tool

REFORMAT = (
    "Your previous response was not valid JSON. Please re-format your answer as a JSON object "
    'with the structure: {"type": "final_answer", "reasoning": "...", "answer": "..."}. Put your '
    'full answer inside the "answer" field as a string.'
)

# --------------------------------------------------------------------------- S60 parse failures


async def test_a_prose_reply_gets_one_reformat_request_and_the_json_retry_is_the_answer() -> None:
    """S60, T-J1: ["Here is my analysis report...", final(same)] ⇒ that answer, 2 iterations, 2 calls."""
    report = "Here is my analysis report..."
    llm = ScriptedLLM([text(report), final(report), SYNTH])

    out = await run(llm, [])

    assert out.answer == report
    assert out.done["iterations"] == 2
    assert len(out.loop_calls()) == 2
    second = out.loop_calls()[1].messages
    assert [(m.role, m.content) for m in second[-2:]] == [("assistant", report), ("user", REFORMAT)]


@pytest.mark.parametrize("max_iterations", [2, 10])
async def test_a_second_parse_failure_in_a_row_is_taken_as_the_raw_answer(max_iterations: int) -> None:
    """S60, T-J2 (+ seed-only variant): ["Raw text 1", "Raw text 2"] ⇒ "Raw text 2" after exactly 2 calls."""
    llm = ScriptedLLM([text("Raw text 1"), text("Raw text 2"), SYNTH])

    out = await run(llm, [], max_iterations=max_iterations)

    assert out.answer == "Raw text 2"
    assert len(out.loop_calls()) == 2
    assert "could not parse" in out.state.steps[-1].reasoning
    assert out.state.steps[-1].reasoning == prompts.PARSE_FAILURE_SENTINEL


async def test_no_reformat_request_on_the_last_turn() -> None:
    """S60: no budget left (i == max_iterations) ⇒ the raw content is the answer at once."""
    llm = ScriptedLLM([text("just prose"), SYNTH])

    out = await run(llm, [], max_iterations=1)

    assert out.answer == "just prose"
    assert len(out.loop_calls()) == 1


async def test_the_parse_retry_is_once_per_failure_streak() -> None:
    """S60: a successful parse ends the streak, so a later failure gets its own retry."""
    llm = ScriptedLLM([text("bad 1"), tool_json("echo", {"text": "x"}), text("bad 2"), text("bad 3"), SYNTH])

    out = await run(llm, [echo_tool()])

    assert out.answer == "bad 3"
    calls = out.loop_calls()
    assert len(calls) == 4
    assert calls[1].messages[-1].content == REFORMAT
    assert calls[3].messages[-1].content == REFORMAT
    assert out.state.tool_call_count == 1  # retries never count (S17)


async def test_a_raw_answer_still_meets_the_completion_checklist() -> None:
    """S60/S44: an accepted raw answer follows the normal final-answer path (checklist)."""
    calls = [tool_json("echo", {"text": t}) for t in "abc"]
    llm = ScriptedLLM(calls + [text("raw 1"), text("raw 2"), final("verified"), final("answer"), SYNTH])

    out = await run(llm, [echo_tool()], max_iterations=20)

    assert out.answer == "answer"
    assert len(out.loop_calls()) == 7


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ('```json\n{"type": "final_answer", "reasoning": "r", "answer": "fenced"}\n```', "fenced"),
        ('Sure! {"type": "final_answer", "answer": "embedded"} Hope that helps.', "embedded"),
        ('{"answer": "no type"}', "no type"),
        ('{"type": "something_else", "reasoning": "r"}', '{"type": "something_else", "reasoning": "r"}'),
    ],
)
async def test_json_actions_are_found_in_fences_and_prose(reply: str, answer: str) -> None:
    """S8: fenced or embedded JSON is parsed; a missing/other type is a final answer (raw if no answer)."""
    llm = ScriptedLLM([text(reply), SYNTH])

    out = await run(llm, [])

    assert out.answer == answer
    assert len(out.loop_calls()) == 1


async def test_null_tool_args_mean_no_arguments() -> None:
    """S8: tool_args null/missing ⇒ {}."""
    rec = Recorder()
    llm = ScriptedLLM([text('{"type": "tool_call", "tool_name": "capture", "tool_args": null}'),
                       final("ok"), SYNTH])

    out = await run(llm, [capture_tool(rec)])

    assert rec.calls == [("capture", {})]
    assert out.state.steps[0].tool_args == {}


# --------------------------------------------------------------------------- S61 reasoning_content


async def test_json_reasoning_falls_back_to_reasoning_content() -> None:
    """S61: empty JSON reasoning + reasoning_content ⇒ the action's reasoning is reasoning_content."""
    llm = ScriptedLLM([tool_json("echo", {"text": "x"}, reasoning="", reasoning_content="R1 thoughts"),
                       final("ok", reasoning="", reasoning_content="final thoughts"), SYNTH])

    out = await run(llm, [echo_tool()])

    assert out.state.steps[0].reasoning == "R1 thoughts"
    assert out.state.steps[1].reasoning == "final thoughts"
    assert [d["reasoning"] for d in out.of("step", type="thinking", status="done")] == [
        "R1 thoughts", "final thoughts"]
    assert out.of("step", type="iteration", status="start")[0]["reasoning"] == "R1 thoughts"


async def test_json_reasoning_wins_over_reasoning_content_when_present() -> None:
    """S61: the fallback applies only when the JSON reasoning is empty."""
    llm = ScriptedLLM([final("ok", reasoning="json reasoning", reasoning_content="hidden"), SYNTH])

    out = await run(llm, [])

    assert out.state.steps[0].reasoning == "json reasoning"


async def test_native_reasoning_is_the_reasoning_content() -> None:
    """S61/S11: native final reasoning = reasoning_content or ""; first call of a batch gets it."""
    llm = ScriptedLLM([
        tool_calls(("c1", "echo", {"text": "a"}), ("c2", "echo", {"text": "b"}), reasoning_content="plan"),
        text("ok", reasoning_content="conclude"),
        SYNTH,
    ], abilities={"tool_call": True})

    out = await run(llm, [echo_tool()])

    starts = out.of("step", type="iteration", status="start")
    assert [s["reasoning"] for s in starts] == ["plan", ""]
    assert out.state.steps[-1].reasoning == "conclude"

    llm = ScriptedLLM([text("ok"), SYNTH], abilities={"tool_call": True})
    out = await run(llm, [])
    assert out.state.steps[-1].reasoning == ""


# --------------------------------------------------------------------------- S59 tool errors


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_an_unknown_tool_becomes_an_error_observation_and_the_loop_goes_on(mode: Mode) -> None:
    """S59: unknown tool ⇒ "Unknown tool '<name>'. Available tools: [<names>]"; the loop continues."""
    llm = mode.llm([mode.call("nonexistent", {}, call_id="call-err"), mode.answer("ok"), SYNTH])

    out = await run(llm, [echo_tool(), add_tool()])

    error = out.state.steps[0].error
    assert error == "Unknown tool 'nonexistent'. Available tools: ['echo', 'add']"
    assert out.answer == "ok"
    last = out.loop_calls()[1].messages[-1]
    assert last.text().endswith(f"Error: {error}")


async def test_a_native_unknown_tool_reports_error_in_its_tool_message() -> None:
    """S59, T-J3: [tool_calls(call-err nonexistent), final "ok"] ⇒ the call-err tool message has "Error:"."""
    llm = ScriptedLLM([tool_calls(("call-err", "nonexistent", {})), text("ok"), SYNTH],
                      abilities={"tool_call": True})

    out = await run(llm, [echo_tool()])

    (msg,) = [m for m in out.loop_calls()[1].messages if m.role == "tool"]
    assert msg.tool_call_id == "call-err" and "Error:" in msg.text()
    assert out.answer == "ok"


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_a_tool_exception_becomes_type_and_message(mode: Mode) -> None:
    """S59, T-J3: RuntimeError("intentional failure") ⇒ "RuntimeError: intentional failure"."""
    llm = mode.llm([mode.call("boom", {}), mode.answer("ok"), SYNTH])

    out = await run(llm, [raising_tool(RuntimeError("intentional failure"))])

    assert out.state.steps[0].error == "RuntimeError: intentional failure"
    assert out.state.steps[0].observation == ""
    done = out.of("step", type="iteration", status="done")[0]
    assert done["error"] == "RuntimeError: intentional failure"


async def test_a_mixed_native_batch_reports_every_outcome() -> None:
    """S59, T-J3: a batch with a good call, an unknown tool and a raising tool ⇒ all three reported."""
    llm = ScriptedLLM([
        tool_calls(("c-ok", "echo", {"text": "fine"}), ("c-unknown", "nope", {}), ("c-raise", "boom", {})),
        text("ok"),
        SYNTH,
    ], abilities={"tool_call": True})

    out = await run(llm, [echo_tool(), raising_tool(RuntimeError("intentional failure"))])

    msgs = {m.tool_call_id: m.text() for m in out.loop_calls()[1].messages if m.role == "tool"}
    assert msgs["c-ok"] == "fine"
    assert msgs["c-unknown"].startswith("Error: Unknown tool 'nope'")
    assert msgs["c-raise"] == "Error: RuntimeError: intentional failure"


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_invalid_arguments_name_the_field(mode: Mode) -> None:
    """S59: arguments that do not validate ⇒ an error observation naming the field."""
    llm = mode.llm([mode.call("echo", {"txt": "typo"}), mode.answer("ok"), SYNTH])

    out = await run(llm, [echo_tool()])

    error = out.state.steps[0].error or ""
    assert "echo" in error and "text" in error
    assert "Field required" in error


async def test_a_cancelled_tool_is_not_swallowed() -> None:
    """S59: CancelledError inside a tool propagates out of the run."""
    async def cancelled(**kw: Any) -> str:
        raise asyncio.CancelledError()

    tool = Tool(name="stop", description="Gets cancelled.", args_model=AnyArgs, fn=cancelled)
    llm = NATIVE.llm([NATIVE.call("stop", {}), NATIVE.answer("never"), SYNTH])

    with pytest.raises(asyncio.CancelledError):
        await run(llm, [tool])


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_tools_outside_the_run_allowlist_are_unknown(mode: Mode) -> None:
    """S35/S59: the run's effective tools drive execution: a registered but disallowed tool is unknown."""
    llm = mode.llm([mode.call("add", {"a": 1, "b": 2}), mode.answer("ok"), SYNTH])

    out = await run(llm, [echo_tool(), add_tool()], allowlist=["echo"])

    assert out.state.steps[0].error == "Unknown tool 'add'. Available tools: ['echo']"


async def test_tools_left_out_by_selection_are_not_executed() -> None:
    """S35 (seed, ⚠D7): after selection the filtered registry drives execution."""
    llm = ScriptedLLM([text('{"tools": ["tool_0"]}'), tool_json("tool_5", {}), final("ok"), SYNTH])

    out = await run(llm, stub_tools(13), query="zzz qqq")

    assert out.state.tool_names == ["tool_0"]
    assert (out.state.steps[0].error or "").startswith("Unknown tool 'tool_5'")


# --------------------------------------------------------------------------- S62 rich content


@pytest.mark.parametrize("mode", MODES, ids=str)
@pytest.mark.parametrize("content_type", ["html", "markdown"])
async def test_rich_artifacts_are_summarised_for_the_llm_in_both_modes(mode: Mode, content_type: str) -> None:
    """S62 (seed, ⚠D8): html/markdown + artifacts ⇒ the LLM sees only the artifact summary."""
    rec = Recorder()
    arts = [Artifact(name="report.html", path="/a/report.html", mime_type="text/html", size=12),
            Artifact(name="chart.png", path="/a/chart.png", mime_type="image/png", size=34)]
    tool = capture_tool(rec, name="render",
                        result=ToolResult(content="<h1>Big</h1>", content_type=content_type, artifacts=arts))
    llm = mode.llm([mode.call("render", {}), mode.answer("ok"), SYNTH])

    out = await run(llm, [tool])

    summary = ("[Artifact generated: report.html, chart.png] The content is rendered as a preview in "
               "the UI and available for download. Do NOT paste the raw source in your answer.")
    seen = out.loop_calls()[1].messages[-1].text()
    assert seen == (summary if mode.native else f"Observation: {summary}")
    step = out.state.steps[0]
    assert (step.observation, step.content_type) == ("<h1>Big</h1>", content_type)
    done = out.of("step", type="iteration", status="done")[0]
    assert done["content_type"] == content_type
    assert [a["name"] for a in done["artifacts"]] == ["report.html", "chart.png"]


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_rich_content_without_artifacts_is_shown_as_is(mode: Mode) -> None:
    """S62: the summary needs both an html/markdown type and artifacts."""
    rec = Recorder()
    tool = capture_tool(rec, name="render", result=ToolResult(content="# Title", content_type="markdown"))
    llm = mode.llm([mode.call("render", {}), mode.answer("ok"), SYNTH])

    out = await run(llm, [tool])

    assert out.loop_calls()[1].messages[-1].text().endswith("# Title")


# --------------------------------------------------------------------------- S64 LLM failures, cancel


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_an_llm_exception_fails_the_run_with_an_error_then_done(mode: Mode) -> None:
    """S64/S80: LLM raises ⇒ status failed; error event, then done "Agent error: <Type>: <msg>", iterations 0."""
    llm = mode.llm([mode.call("echo", {"text": "x"}), TimeoutError("model timed out")])

    out = await run(llm, [echo_tool()], status="failed")

    assert out.state.status == "failed"
    last_two = out.events[-2:]
    assert [e.channel for e in last_two] == ["error", "done"]
    assert last_two[0].data["message"] == "TimeoutError: model timed out"
    assert out.done["answer"] == "Agent error: TimeoutError: model timed out"
    assert out.done["iterations"] == 0
    assert out.done["status"] == "failed"
    assert [e.channel for e in out.events].count("done") == 1


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_cancelling_mid_run_ends_it_cancelled_with_done_last(mode: Mode) -> None:
    """S80/DESIGN invariant 5: a cancel request ⇒ status cancelled, done is the last event, once."""
    cancel = asyncio.Event()

    def stop(**kw: Any) -> str:
        cancel.set()
        return "stopping"

    tool = Tool(name="stop", description="Requests cancellation.", args_model=AnyArgs, fn=stop)
    llm = mode.llm([mode.call("stop", {}), mode.answer("never used")])

    out = await run(llm, [tool], cancel=cancel, status="cancelled")

    assert len(out.loop_calls()) == 1
    assert out.events[-1].channel == "done"
    assert [e.channel for e in out.events].count("done") == 1
    assert out.done["status"] == "cancelled"
    assert out.of("error", kind="cancelled")


async def test_a_run_cancelled_before_it_starts_still_ends_with_done() -> None:
    """DESIGN invariant 5: cancel set up front ⇒ no LLM call, status cancelled, done last."""
    cancel = asyncio.Event()
    cancel.set()
    llm = JSON.llm([])

    out = await run(llm, [], cancel=cancel, status="cancelled")

    assert llm.calls == []
    assert out.events[-1].channel == "done"
