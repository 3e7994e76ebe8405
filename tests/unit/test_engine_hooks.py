"""Group D at engine level — hooks around every tool call (SPEC S36a–S36e, T-D1…T-D3).

The hook registry itself is tested in ``test_hooks.py``; here hooks run inside real runs.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine_kit import (
    MODES,
    SYNTH,
    Mode,
    Recorder,
    capture_tool,
    echo_tool,
    post_hook,
    pre_hook,
    raising_tool,
    run,
)
from reactq.shared.hooks import HookContext, HookResult
from reactq.shared.models import Artifact, ToolResult


def block(error: str | None = "Blocked by test hook") -> Any:
    return pre_hook(lambda ctx: HookResult(allow=False, error=error), name="blocker")


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_a_blocked_call_never_runs_and_its_step_carries_the_hooks_error(mode: Mode) -> None:
    """S36d, T-D1: PRE hook allow=False ⇒ echo never ran; steps[0].error has the hook's error."""
    rec = Recorder()
    llm = mode.llm([mode.call("echo", {"text": "hello"}, call_id="call_1"), mode.answer("done"), SYNTH])

    out = await run(llm, [echo_tool(rec)], hooks=[block()])

    assert rec.calls == []
    assert "Blocked by test hook" in (out.state.steps[0].error or "")
    assert out.answer == "done"


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_the_llm_sees_a_blocked_call_as_an_error_observation(mode: Mode) -> None:
    """S36d: the block reaches the LLM as "Error: <hook error>" (tool message or Observation)."""
    llm = mode.llm([mode.call("echo", {"text": "hello"}, call_id="call_1"), mode.answer("done"), SYNTH])

    out = await run(llm, [echo_tool()], hooks=[block()])

    last = out.loop_calls()[1].messages[-1]
    if mode.native:
        assert (last.role, last.tool_call_id, last.content) == ("tool", "call_1", "Error: Blocked by test hook")
    else:
        assert (last.role, last.content) == ("user", "Observation: Error: Blocked by test hook")


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_a_block_without_an_error_text_names_the_hook(mode: Mode) -> None:
    """S36b/S36d: allow=False without error ⇒ "Blocked by hook '<name>'"."""
    llm = mode.llm([mode.call("echo", {"text": "hello"}), mode.answer("done"), SYNTH])

    out = await run(llm, [echo_tool()], hooks=[block(error=None)])

    assert out.state.steps[0].error == "Blocked by hook 'blocker'"


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_a_pre_hook_can_rewrite_the_arguments_the_tool_receives(mode: Mode) -> None:
    """S36d, T-D2: PRE hook adds injected="by_hook" ⇒ the tool gets {text: original, injected: by_hook}."""
    rec = Recorder()
    inject = pre_hook(lambda ctx: HookResult(modified_args={**(ctx.tool_args or {}), "injected": "by_hook"}))
    llm = mode.llm([mode.call("capture", {"text": "original"}), mode.answer("done"), SYNTH])

    out = await run(llm, [capture_tool(rec)], hooks=[inject])

    assert rec.calls == [("capture", {"text": "original", "injected": "by_hook"})]
    # The step keeps the LLM's original arguments.
    assert out.state.steps[0].tool_args == {"text": "original"}


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_a_post_hook_can_rewrite_the_observation(mode: Mode) -> None:
    """S36d, T-D3: POST hook returns "[modified] " + result ⇒ steps[0].observation starts with it."""
    modify = post_hook(lambda ctx: HookResult(modified_result=f"[modified] {ctx.tool_result}"))
    llm = mode.llm([mode.call("echo", {"text": "data"}), mode.answer("done"), SYNTH])

    out = await run(llm, [echo_tool()], hooks=[modify])

    assert out.state.steps[0].observation == "[modified] data"
    assert out.loop_calls()[1].messages[-1].text().endswith("[modified] data")


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_post_hooks_run_in_priority_order_each_seeing_the_last_rewrite(mode: Mode) -> None:
    """S36a/S36c, T-D3: priorities 30/10/20 run as 10, 20, 30; wrappers nest in that order."""
    hooks = [
        post_hook(lambda ctx, t=tag: HookResult(modified_result=f"[{t}]{ctx.tool_result}[/{t}]"),
                  name=tag, priority=prio)
        for tag, prio in (("C", 30), ("A", 10), ("B", 20))
    ]
    llm = mode.llm([mode.call("echo", {"text": "data"}), mode.answer("done"), SYNTH])

    out = await run(llm, [echo_tool()], hooks=hooks)

    assert out.state.steps[0].observation == "[C][B][A]data[/A][/B][/C]"


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_a_block_at_priority_one_stops_the_chain_and_a_crashing_hook_does_not(mode: Mode) -> None:
    """S36a/S36b, T-D3: blocking hook first ⇒ later hook never runs; a crashing hook is skipped."""
    seen: list[str] = []

    def crash(ctx: HookContext) -> HookResult:
        seen.append("crash")
        raise RuntimeError("hook bug")

    def later(ctx: HookContext) -> HookResult:
        seen.append("later")
        return HookResult()

    # Run 1: a crashing hook (priority 1) does not stop the priority-2 hook; the tool runs.
    rec = Recorder()
    llm = mode.llm([mode.call("echo", {"text": "x"}), mode.answer("done"), SYNTH])
    out = await run(llm, [echo_tool(rec)],
                    hooks=[pre_hook(later, name="later", priority=2), pre_hook(crash, name="crash", priority=1)])
    assert seen == ["crash", "later"]
    assert rec.calls == [("echo", {"text": "x"})]
    assert out.state.steps[0].error is None

    # Run 2: a blocking hook at priority 1 ⇒ the priority-2 hook never runs.
    seen.clear()
    llm = mode.llm([mode.call("echo", {"text": "x"}), mode.answer("done"), SYNTH])
    out = await run(llm, [echo_tool()],
                    hooks=[pre_hook(later, name="later", priority=2),
                           pre_hook(lambda ctx: HookResult(allow=False, error="stop"), priority=1)])
    assert seen == []
    assert out.state.steps[0].error == "stop"


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_post_hooks_do_not_run_for_unknown_tools_or_failed_calls(mode: Mode) -> None:
    """S36d: POST hooks run only after a successful call."""
    seen: list[str | None] = []
    watch = post_hook(lambda ctx: (seen.append(ctx.tool_name), HookResult())[1])
    llm = mode.llm([mode.call("missing", {}), mode.call("boom", {}, call_id="c2"),
                    mode.call("echo", {"text": "ok"}, call_id="c3"), mode.answer("done"), SYNTH])

    await run(llm, [echo_tool(), raising_tool(RuntimeError("x"))], hooks=[watch], completion_check=False)

    assert seen == ["echo"]


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_pre_hooks_run_before_the_tool_lookup(mode: Mode) -> None:
    """S36d: PRE hooks see calls to unknown tools too (they run before the lookup)."""
    seen: list[str | None] = []
    watch = pre_hook(lambda ctx: (seen.append(ctx.tool_name), HookResult())[1])
    llm = mode.llm([mode.call("missing", {}), mode.answer("done"), SYNTH])

    out = await run(llm, [echo_tool()], hooks=[watch])

    assert seen == ["missing"]
    assert "Unknown tool 'missing'" in (out.state.steps[0].error or "")


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_a_post_rewrite_of_a_rich_result_keeps_its_type_and_artifacts(mode: Mode) -> None:
    """S36d: for a ToolResult the content is replaced, content_type and artifacts are kept."""
    rec = Recorder()
    art = Artifact(name="page.html", path="/tmp/page.html", mime_type="text/html", size=10)
    tool = capture_tool(rec, name="render",
                        result=ToolResult(content="<p>hi</p>", content_type="html", artifacts=[art]))
    rewrite = post_hook(lambda ctx: HookResult(modified_result="<p>rewritten</p>"))
    llm = mode.llm([mode.call("render", {}), mode.answer("done"), SYNTH])

    out = await run(llm, [tool], hooks=[rewrite])

    step = out.state.steps[0]
    assert (step.observation, step.content_type, [a.name for a in step.artifacts]) == (
        "<p>rewritten</p>", "html", ["page.html"])


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_blocked_calls_count_for_tool_calls_and_cycle_detection(mode: Mode) -> None:
    """S36d: blocked calls count for tool_call_count and cycle detection."""
    llm = mode.llm([mode.call("echo", {"text": "same"}, call_id=f"c{i}") for i in range(3)]
                   + [mode.answer("done"), SYNTH])

    out = await run(llm, [echo_tool()], hooks=[block()], completion_check=False)

    assert out.state.tool_call_count == 3
    assert any("with identical arguments 3 times" in m.text() for m in out.loop_calls()[3].messages)


async def test_hooks_see_the_run_metadata_and_the_native_tool_call_id() -> None:
    """S36e: metadata carries the request metadata, tool_call_id and requires_confirmation."""
    from engine_kit import NATIVE

    seen: list[dict[str, Any]] = []
    watch = pre_hook(lambda ctx: (seen.append(dict(ctx.metadata)), HookResult())[1])
    llm = NATIVE.llm([NATIVE.call("echo", {"text": "x"}, call_id="call_9"), NATIVE.answer("done"), SYNTH])

    await run(llm, [echo_tool()], hooks=[watch], metadata={"org_id": "acme"})

    assert seen[0]["org_id"] == "acme"
    assert seen[0]["tool_call_id"] == "call_9"
    assert seen[0]["requires_confirmation"] is False


async def test_requires_confirmation_comes_from_the_tool_per_call() -> None:
    """S36e: requires_confirmation = tool.requires_confirmation_for(args) if it exists, else the attribute."""
    from dataclasses import dataclass

    from engine_kit import JSON, TextArgs
    from reactq.shared.tools.base import Tool

    @dataclass
    class Gated(Tool):
        def requires_confirmation_for(self, args: dict[str, Any]) -> bool:
            return args.get("text") == "delete"

    gated = Gated(name="gated", description="Sometimes needs approval.", args_model=TextArgs,
                  fn=lambda text: text)
    flagged = Tool(name="flagged", description="Always needs approval.", args_model=TextArgs,
                   fn=lambda text: text, requires_confirmation=True)
    seen: list[tuple[str | None, bool]] = []
    watch = pre_hook(lambda ctx: (seen.append((ctx.tool_name, ctx.metadata["requires_confirmation"])),
                                  HookResult())[1])
    llm = JSON.llm([JSON.call("gated", {"text": "read"}), JSON.call("gated", {"text": "delete"}),
                    JSON.call("flagged", {"text": "x"}), JSON.call("missing", {"text": "x"}),
                    JSON.answer("done"), SYNTH])

    await run(llm, [gated, flagged], hooks=[watch], completion_check=False)

    assert seen == [("gated", False), ("gated", True), ("flagged", True), ("missing", False)]
