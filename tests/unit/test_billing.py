"""A run's usage is everything it was billed for, priced in dollars from the provider's usage.

The selection (each structured-output level), every loop turn and the streamed synthesis
all count in ``done.usage``; ``cost_usd`` is each call's usage at the model's price.
"""

from __future__ import annotations

import pytest

from engine_kit import MODES, Mode, echo_tool, run, stub_tools
from reactq.shared.llm.pricing import Price, call_cost, reserve_cost
from reactq.shared.llm.testing import ScriptedLLM, final, text, tool_json

PRICE = Price(input_per_mtok=2.5, output_per_mtok=10.0, cached_input_per_mtok=1.25)


def test_a_call_is_priced_from_its_usage_cached_tokens_at_their_own_price() -> None:
    usage = {"prompt_tokens": 1234, "completion_tokens": 567, "cache_read_input_tokens": 1000}
    # 234 × 2.5 + 1000 × 1.25 + 567 × 10 = 585 + 1250 + 5670 = 7505 micro-dollars
    assert call_cost(usage, PRICE) == 0.007505
    no_cached_price = Price(input_per_mtok=2.5, output_per_mtok=10.0)
    assert call_cost(usage, no_cached_price) == pytest.approx(0.008755, abs=1e-12)
    assert reserve_cost(1000, 512, PRICE) == 0.00762


@pytest.mark.parametrize("mode", MODES, ids=str)
async def test_done_usage_counts_the_loop_and_the_synthesis(mode: Mode) -> None:
    llm = mode.llm([
        mode.call("echo", {"text": "a"}, usage={"prompt_tokens": 10, "completion_tokens": 5}),
        mode.answer("ok", usage={"prompt_tokens": 20, "completion_tokens": 7}),
        text("synth", usage={"prompt_tokens": 1000, "completion_tokens": 100}),
    ], price=PRICE)

    out = await run(llm, [echo_tool()], completion_check=False)

    usage = out.done["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (1030, 112, 1142)
    assert usage["llm_calls"] == 3
    # (1030 × 2.5 + 112 × 10) / 1e6 = 0.003695
    assert usage["cost_usd"] == 0.003695


async def test_done_usage_counts_the_tool_selection_too() -> None:
    llm = ScriptedLLM([
        text('{"tools": ["tool_0"]}', usage={"prompt_tokens": 300, "completion_tokens": 9}),
        tool_json("tool_0", {}, usage={"prompt_tokens": 50, "completion_tokens": 5}),
        final("done", usage={"prompt_tokens": 60, "completion_tokens": 6}),
        text("synth", usage={"prompt_tokens": 70, "completion_tokens": 7}),
    ], price=PRICE)

    out = await run(llm, stub_tools(13), query="zzz qqq", completion_check=False)

    usage = out.done["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["llm_calls"]) == (480, 27, 4)
    assert usage["cost_usd"] == (480 * 2.5 + 27 * 10) / 1e6


async def test_an_unpriced_model_reports_tokens_and_no_cost() -> None:
    llm = ScriptedLLM([final("a", usage={"prompt_tokens": 3, "completion_tokens": 2}),
                       text("synth", usage={"prompt_tokens": 4, "completion_tokens": 1})])

    out = await run(llm, [])

    assert out.done["usage"]["total_tokens"] == 10
    assert out.done["usage"]["cost_usd"] == 0.0


async def test_a_guarded_answers_synthesis_counts_too() -> None:
    """With an ``ANSWER`` guardrail the synthesis is held back until checked: still billed."""
    from reactq.shared.hooks import Hook, HookContext, HookPoint, HookResult

    async def passes(ctx: HookContext) -> HookResult:
        return HookResult()

    llm = ScriptedLLM([final("ok", usage={"prompt_tokens": 20, "completion_tokens": 7}),
                       text("synth", usage={"prompt_tokens": 1000, "completion_tokens": 100})], price=PRICE)

    out = await run(llm, [], hooks=[Hook(name="check", hook_point=HookPoint.ANSWER, handler=passes)],
                    completion_check=False)

    assert out.done["usage"]["llm_calls"] == 2
    assert out.done["usage"]["cost_usd"] == (1020 * 2.5 + 107 * 10) / 1e6
