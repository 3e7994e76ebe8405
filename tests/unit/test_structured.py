"""structured_llm_call: the three-level degradation chain (SPEC §B, S19–S28)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reactq.shared.engine.structured import REFORMAT_PROMPT, structured_llm_call
from reactq.shared.errors import StructuredOutputError
from reactq.shared.llm.testing import ScriptedLLM, text, tool_calls
from reactq.shared.models import ChatMessage

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}
MESSAGES = [ChatMessage(role="user", content="What is the answer?")]
ALL = {"tool_call": True, "json_mode": True}


async def call(llm: ScriptedLLM, **kwargs: Any) -> Any:
    return await structured_llm_call(llm, MESSAGES, SCHEMA, "answer_fn", **kwargs)


# --- T-B1 / T-B2 / T-B3 -------------------------------------------------------------


async def test_native_function_call_arguments_are_the_value() -> None:
    """S21 T-B1: tool_call ability ⇒ one forced function call; its arguments are the value."""
    llm = ScriptedLLM([tool_calls(("c1", "answer_fn", {"answer": "42"}),
                                  usage={"prompt_tokens": 10, "completion_tokens": 5})],
                      abilities={"tool_call": True})
    result = await call(llm)
    assert result.value == {"answer": "42"}
    assert result.raw_data == {"answer": "42"}
    assert result.level_used == "native_fc"
    assert result.llm_calls == 1
    assert result.total_usage.total_tokens == 15


async def test_native_call_forces_the_named_function_with_the_schema() -> None:
    """S21: tools=[schema function], tool_choice names it, reasoning_effort=None."""
    llm = ScriptedLLM([tool_calls(("c1", "answer_fn", {"answer": "42"}))],
                      abilities={"tool_call": True})
    await call(llm, temperature=0.0, max_tokens=50)
    kwargs = llm.calls[0].kwargs
    assert kwargs["tools"] == [{"type": "function", "function": {
        "name": "answer_fn", "description": "Return structured data matching the schema.",
        "parameters": SCHEMA}}]
    assert kwargs["tool_choice"] == {"type": "function", "function": {"name": "answer_fn"}}
    assert "reasoning_effort" in kwargs and kwargs["reasoning_effort"] is None
    assert kwargs["temperature"] == 0.0 and kwargs["max_tokens"] == 50


async def test_native_call_without_tool_calls_falls_back_to_json_in_content() -> None:
    """S21: no tool_calls ⇒ data = extract_json(content)."""
    llm = ScriptedLLM([text('Here: {"answer": "7"}')], abilities={"tool_call": True})
    result = await call(llm)
    assert (result.value, result.level_used, result.llm_calls) == ({"answer": "7"}, "native_fc", 1)


async def test_unparseable_streamed_arguments_get_a_second_chance() -> None:
    """S21: arguments that arrived as {"_raw": ...} are run through extract_json."""
    llm = ScriptedLLM([tool_calls(("c1", "answer_fn", {"_raw": '{"answer": "9"}'}))],
                      abilities={"tool_call": True})
    assert (await call(llm)).value == {"answer": "9"}


async def test_empty_native_reply_degrades_to_json_mode_without_retry() -> None:
    """S21 T-B2: native level has no retry; json_mode succeeds on the 2nd call."""
    llm = ScriptedLLM([text(""), text('{"answer":"42"}')], abilities=ALL)
    result = await call(llm)
    assert result.level_used == "json_mode"
    assert result.llm_calls == 2
    assert llm.calls[1].kwargs["response_format"] == {"type": "json_object"}
    assert "tools" not in llm.calls[1].kwargs


async def test_json_mode_retry_sums_usage_over_both_calls() -> None:
    """S23 S26 T-B3: a bad reply is retried once; usage is the sum of both calls."""
    llm = ScriptedLLM([text("bad", usage={"prompt_tokens": 10, "completion_tokens": 5}),
                       text('{"answer":"42"}',
                            usage={"prompt_tokens": 20, "completion_tokens": 10})],
                      abilities={"json_mode": True})
    result = await call(llm)
    assert result.level_used == "json_mode"
    assert result.llm_calls == 2
    usage = result.total_usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (30, 15, 45)


async def test_usage_sums_cache_counters_too() -> None:
    """S26: cache_read/cache_creation tokens are summed as well."""
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "cache_read_input_tokens": 3,
             "cache_creation_input_tokens": 2}
    llm = ScriptedLLM([text("nope", usage=usage), text('{"answer":"1"}', usage=usage)])
    result = await call(llm)
    assert result.total_usage.cache_read_input_tokens == 6
    assert result.total_usage.cache_creation_input_tokens == 4


async def test_reformat_retry_appends_the_bad_reply_and_the_verbatim_prompt() -> None:
    """S23: retry = messages + assistant(bad content) + user(reformat prompt)."""
    llm = ScriptedLLM([text("bad"), text('{"answer":"42"}')], abilities={"json_mode": True})
    await call(llm)
    retry = llm.calls[1].messages
    assert [m.role for m in retry] == ["user", "assistant", "user"]
    assert retry[1].content == "bad"
    assert retry[2].content == REFORMAT_PROMPT == (
        "Your previous response could not be parsed as valid JSON. Please respond with ONLY "
        "a JSON object matching the requested schema — no markdown, no explanation, no code "
        "fences.")
    assert len(MESSAGES) == 1  # the caller's list is untouched


async def test_plain_text_reads_json_inside_fences() -> None:
    """S22 T-B3: a plain model's fenced JSON is extracted at level plain_text."""
    llm = ScriptedLLM([text('```json\n{"answer":"42"}\n```')])
    result = await call(llm)
    assert (result.value, result.level_used) == ({"answer": "42"}, "plain_text")
    assert result.llm_calls == 1
    assert "response_format" not in llm.calls[0].kwargs


async def test_regex_fallback_is_used_at_the_plain_level() -> None:
    """S22 T-B3: regex_fallback extracts data from non-JSON plain text."""
    llm = ScriptedLLM([text("hello world, not json")])
    result = await call(llm, regex_fallback=lambda s: {"answer": "regex-extracted"})
    assert result.value == {"answer": "regex-extracted"}
    assert result.level_used == "plain_text"


async def test_regex_fallback_is_not_used_at_the_json_mode_level() -> None:
    """S22: regex only at plain_text; json_mode's two failures fall through to plain."""
    seen: list[str] = []

    def fallback(content: str) -> dict[str, Any] | None:
        seen.append(content)
        return {"answer": "regex"} if content == "plain" else None

    llm = ScriptedLLM([text("j1"), text("j2"), text("plain")], abilities={"json_mode": True})
    result = await call(llm, regex_fallback=fallback)
    assert result.level_used == "plain_text"
    assert seen == ["plain"]


async def test_raising_regex_fallback_is_a_failed_attempt() -> None:
    """S22 S24: a regex_fallback exception does not escape."""
    def fallback(content: str) -> dict[str, Any]:
        raise RuntimeError("boom")

    llm = ScriptedLLM([text("a"), text("b")])
    result = await call(llm, regex_fallback=fallback, default_value=None)
    assert result.value is None and result.llm_calls == 2


# --- total failure ----------------------------------------------------------------------


async def test_default_value_is_returned_with_empty_raw_data() -> None:
    """S27 T-B3: with default_value, total failure returns it; raw_data {} and plain_text."""
    llm = ScriptedLLM([text("nope"), text("nope")])
    result = await call(llm, default_value={"answer": "default"})
    assert result.value == {"answer": "default"}
    assert result.raw_data == {}
    assert result.level_used == "plain_text"
    assert result.llm_calls == 2


async def test_none_is_a_valid_default_value() -> None:
    """S27: default_value=None is returned rather than raising."""
    llm = ScriptedLLM([text("nope"), text("nope")])
    result = await call(llm, default_value=None)
    assert result.value is None and result.raw_data == {}


async def test_total_failure_without_default_raises_structured_output_error() -> None:
    """S27 T-B3: StructuredOutputError, also a ValueError, names the extraction failure."""
    llm = ScriptedLLM([text("nope"), text("nope")])
    with pytest.raises(StructuredOutputError, match="extraction levels failed"):
        await call(llm)
    llm = ScriptedLLM([text("nope"), text("nope")])
    with pytest.raises(ValueError):
        await call(llm)


async def test_error_message_quotes_the_last_content_cut_to_200_chars() -> None:
    """S27: message = prefix + last non-empty content, first 200 chars + '...'."""
    long = "x" * 250
    llm = ScriptedLLM([text(long), text("")])
    with pytest.raises(StructuredOutputError) as info:
        await call(llm)
    assert str(info.value) == (
        "All structured extraction levels failed. Last content: " + "x" * 200 + "...")


async def test_short_last_content_is_quoted_whole() -> None:
    """S27: content of 200 chars or fewer gets no ellipsis."""
    llm = ScriptedLLM([text("first"), text("second")])
    with pytest.raises(StructuredOutputError) as info:
        await call(llm)
    assert str(info.value).endswith("Last content: second")


# --- parse_fn ---------------------------------------------------------------------------


async def test_parse_fn_converts_the_dict_into_the_value() -> None:
    """S25: the value is parse_fn(data); raw_data keeps the dict."""
    llm = ScriptedLLM([text('{"answer":"42"}')])
    result = await call(llm, parse_fn=lambda d: int(d["answer"]))
    assert result.value == 42 and result.raw_data == {"answer": "42"}


async def test_parse_fn_raising_value_error_everywhere_raises_structured_output_error() -> None:
    """S25 T-B3: a parse_fn that always raises ValueError ⇒ StructuredOutputError."""
    def parse(data: dict[str, Any]) -> Any:
        raise ValueError("invalid plan")

    llm = ScriptedLLM([text('{"answer":"42"}')], repeat_last=True)
    with pytest.raises(StructuredOutputError):
        await call(llm, parse_fn=parse)
    assert len(llm.calls) == 2  # valid JSON but rejected ⇒ content non-empty ⇒ retried


async def test_parse_fn_returning_none_counts_as_a_failed_attempt() -> None:
    """S25: None from parse_fn degrades to the next level."""
    llm = ScriptedLLM([tool_calls(("c", "answer_fn", {"answer": "bad"})),
                       text('{"answer":"good"}')],
                      abilities={"tool_call": True, "json_mode": True})
    result = await call(llm, parse_fn=lambda d: d if d["answer"] == "good" else None)
    assert result.level_used == "json_mode"
    assert result.value == {"answer": "good"}


async def test_parse_fn_failure_then_success_on_the_reformat_retry() -> None:
    """S23 S25: a parse_fn rejection with non-empty content triggers the retry."""
    replies = [text('{"answer":"no"}'), text('{"answer":"yes"}')]
    llm = ScriptedLLM(replies, abilities={"json_mode": True})
    result = await call(llm, parse_fn=lambda d: d if d["answer"] == "yes" else None)
    assert (result.level_used, result.llm_calls) == ("json_mode", 2)


# --- exceptions and call counts -----------------------------------------------------------


async def test_llm_exception_counts_as_a_failed_attempt_without_retry() -> None:
    """S24: a raising call is counted, has empty content, so its level is not retried."""
    llm = ScriptedLLM([RuntimeError("down"), text('{"answer":"42"}')],
                      abilities={"json_mode": True})
    result = await call(llm)
    assert result.level_used == "plain_text"
    assert result.llm_calls == 2


async def test_llm_exceptions_never_escape_except_structured_output_error() -> None:
    """S24: all calls raising ⇒ StructuredOutputError, not the LLM's exception."""
    llm = ScriptedLLM([ConnectionError("x")], repeat_last=True, abilities=ALL)
    with pytest.raises(StructuredOutputError, match="Last content: $"):
        await call(llm)
    assert len(llm.calls) == 3  # one per level, no retries on empty content


async def test_cancellation_is_not_swallowed() -> None:
    """S24: only ordinary exceptions are failed attempts; cancellation propagates."""
    llm = ScriptedLLM([asyncio.CancelledError()])
    with pytest.raises(asyncio.CancelledError):
        await call(llm, default_value=None)


@pytest.mark.parametrize(
    ("abilities", "max_calls", "levels"),
    [
        ({"tool_call": True, "json_mode": True}, 5, ["native", "json", "json", "plain", "plain"]),
        ({"json_mode": True}, 4, ["json", "json", "plain", "plain"]),
        ({}, 2, ["plain", "plain"]),
        ({"tool_call": True}, 3, ["native", "plain", "plain"]),
        ({"tool_call": True, "tool_choice": False, "json_mode": True}, 4,
         ["json", "json", "plain", "plain"]),
    ],
)
async def test_maximum_llm_calls_per_ability_combination(
    abilities: dict[str, bool], max_calls: int, levels: list[str]
) -> None:
    """S20 S28: worst case 5 (tool_call+json_mode), 4 (json_mode), 2 (plain), 3 (tool_call)."""
    llm = ScriptedLLM([text("not json")], repeat_last=True, abilities=abilities)
    result = await call(llm, default_value="fallback")
    assert result.value == "fallback"
    assert result.llm_calls == max_calls == len(llm.calls)
    assert [_level_of(c.kwargs) for c in llm.calls] == levels


def _level_of(kwargs: dict[str, Any]) -> str:
    if kwargs.get("tools"):
        return "native"
    return "json" if kwargs.get("response_format") else "plain"


async def test_tool_choice_false_skips_the_native_level() -> None:
    """S20: tool_choice=False disables native_fc even with tool_call."""
    llm = ScriptedLLM([text('{"answer":"1"}')],
                      abilities={"tool_call": True, "tool_choice": False})
    result = await call(llm)
    assert result.level_used == "plain_text"
    assert "tools" not in llm.calls[0].kwargs


# --- options for typed answers ------------------------------------------------------


async def test_prefer_json_schema_sends_the_schema_as_response_format_then_degrades() -> None:
    llm = ScriptedLLM([text("no json"), text("still none"), text('{"answer": "7"}')],
                      abilities={"tool_call": True, "json_mode": True, "json_schema": True})
    result = await call(llm, prefer_json_schema=True)
    assert result.level_used == "json_mode" and result.value == {"answer": "7"}
    assert llm.calls[0].kwargs["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "answer_fn", "schema": SCHEMA}}
    assert "tools" not in llm.calls[0].kwargs  # json_schema takes the first level's place


async def test_allow_native_false_skips_the_function_call() -> None:
    llm = ScriptedLLM([text('{"answer": "7"}')], abilities=ALL)
    result = await call(llm, allow_native=False)
    assert result.level_used == "json_mode" and "tools" not in llm.calls[0].kwargs


async def test_passthrough_exceptions_escape_instead_of_degrading() -> None:
    from reactq.shared.errors import RateLimited

    llm = ScriptedLLM([RateLimited("m", 1.0, "rpm")], abilities=ALL)
    with pytest.raises(RateLimited):
        await call(llm, passthrough=(RateLimited,))
    assert len(llm.calls) == 1
