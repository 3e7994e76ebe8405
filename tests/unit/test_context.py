"""The context guard (SPEC §K, S68–S75)."""

from __future__ import annotations

import logging

import pytest

from reactq.shared.engine.context import (
    HINT_PROMPTS,
    ContextGuard,
    budget_for,
    estimate_messages,
    estimate_tokens,
    smart_truncate,
)
from reactq.shared.llm.testing import FunctionLLM, ScriptedLLM, text
from reactq.shared.models import ChatMessage, ToolCallRequest


def msg(role: str, content: str, *, pinned: bool = False) -> ChatMessage:
    return ChatMessage(role=role, content=content, pinned=pinned)  # type: ignore[arg-type]


def alternating(n: int, size: int = 300, tag: str = "m") -> list[ChatMessage]:
    """``n`` user/assistant messages of ``size`` chars, user first."""
    roles = ("user", "assistant")
    return [msg(roles[i % 2], f"{tag}{i}:".ljust(size, "x")) for i in range(n)]


def summaries(messages: list[ChatMessage]) -> list[ChatMessage]:
    return [m for m in messages if m.role == "system" and "[Conversation summary]" in m.text()]


# --- estimates -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text_in", "tokens"),
    [("a" * 400, 100), ("中" * 10, 6), ("Hello你好World世界", 5), ("中" * 100, 66), ("", 0),
     ("a", 1)],
)
def test_token_estimate_matches_the_spec_examples(text_in: str, tokens: int) -> None:
    """S74: ASCII/4 + non-ASCII/1.5, int, at least 1 when non-empty."""
    assert estimate_tokens(text_in) == tokens


def test_message_estimate_adds_four_per_message_and_765_per_image() -> None:
    """S74 §0.2: +4 per message; an image part costs 765."""
    vision = ChatMessage(role="user", content=[
        {"type": "text", "text": "a" * 40},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,xx"}},
    ])
    assert estimate_messages([msg("user", "a" * 400), vision, msg("assistant", "")]) == (
        (4 + 100) + (4 + 10 + 765) + 4)


def test_tool_call_arguments_count_towards_the_estimate() -> None:
    """S74: tool calls are sent to the model, so they cost tokens too."""
    call = ChatMessage(role="assistant", content=None, tool_calls=[
        ToolCallRequest(id="c1", name="echo", arguments={"text": "x" * 400})])
    assert estimate_messages([call]) > 100


@pytest.mark.parametrize(
    ("context_size", "max_output", "budget"),
    [(128000, 64000, 64000), (8000, 6000, 4000), (200000, 8000, 192000), (None, None, 64000)],
)
def test_budget_is_context_minus_output_with_a_floor(
    context_size: int | None, max_output: int | None, budget: int
) -> None:
    """S68: context_size − max_output, floor 4000, default 64000."""
    assert budget_for(context_size, max_output) == budget


# --- smart_truncate ------------------------------------------------------------------------


def test_fitting_history_is_returned_as_an_unchanged_copy() -> None:
    """S73: fits ⇒ an equal, new list."""
    history = alternating(4)
    result = smart_truncate(history, 10_000)
    assert result == history and result is not history


def test_truncation_keeps_the_most_recent_suffix_that_fits() -> None:
    """S73: walk backwards, keep messages until one does not fit."""
    history = alternating(10)  # 79 tokens each
    result = smart_truncate(history, 250)
    assert result == history[-3:][1:]  # 3 fit; the leading assistant is dropped
    assert result[0].role == "user"


def test_pinned_and_system_messages_always_survive_truncation() -> None:
    """S73 S75: pinned cost is deducted first; system messages are kept too."""
    system = msg("system", "You are helpful.")
    query = msg("user", "My task is X.", pinned=True)
    history = [system, query, *alternating(10)]
    result = smart_truncate(history, 200)
    assert result[:2] == [system, query]
    assert len(result) < len(history)
    assert estimate_messages(result) <= 200


def test_orphan_tool_results_are_not_kept_at_the_head() -> None:
    """S73: a suffix must not start with a tool result whose call was cut off."""
    call = ChatMessage(role="assistant", content="", tool_calls=[
        ToolCallRequest(id="c1", name="echo", arguments={"text": "y" * 800})])
    result_msg = ChatMessage(role="tool", content="ok", tool_call_id="c1")
    history = [msg("user", "q" * 400), call, result_msg, msg("user", "next")]
    result = smart_truncate(history, 30)
    assert [m.role for m in result] == ["user"] and result[0].content == "next"


def test_truncation_does_not_mutate_its_input() -> None:
    """S73: a pure function over a new list."""
    history = [msg("user", "q", pinned=True), *alternating(10)]
    snapshot = [m.model_copy(deep=True) for m in history]
    smart_truncate(history, 100)
    assert history == snapshot


# --- ContextGuard: caps and fast path --------------------------------------------------------


async def test_messages_within_budget_are_returned_without_any_llm_call() -> None:
    """S70: estimate ≤ budget ⇒ returned as is."""
    llm = ScriptedLLM([])
    history = alternating(4)
    assert await ContextGuard(10_000, llm=llm).check_and_compact(history) == history
    assert llm.calls == []


async def test_oversized_messages_are_cut_with_a_truncated_marker() -> None:
    """S70 T-K1: max_message_chars=100 and a 200-char message ⇒ 100 chars + '\\n[Truncated]'."""
    long = ChatMessage(role="tool", content="z" * 200, tool_call_id="c9", pinned=True)
    guard = ContextGuard(10_000, max_message_chars=100)
    (result,) = await guard.check_and_compact([long])
    assert result.content == "z" * 100 + "\n[Truncated]"
    assert (result.role, result.tool_call_id, result.pinned) == ("tool", "c9", True)
    assert long.content == "z" * 200


async def test_vision_arrays_are_never_char_truncated() -> None:
    """S70: list content is left alone by the per-message cap."""
    parts = [{"type": "text", "text": "t" * 500}]
    (result,) = await ContextGuard(10_000, max_message_chars=100).check_and_compact(
        [ChatMessage(role="user", content=parts)])
    assert result.content == parts


async def test_default_budget_applies_when_none_is_passed() -> None:
    """S70: the guard's own budget is the default; a call's budget overrides it."""
    guard = ContextGuard(100)
    history = alternating(10)
    assert len(await guard.check_and_compact(history)) < 10
    assert await guard.check_and_compact(history, budget=10_000) == history


# --- ContextGuard: LLM compaction (T-K1) ----------------------------------------------------


async def test_llm_compaction_replaces_old_messages_with_one_summary() -> None:
    """S71 T-K1: budget 400, 10 messages of ~300 chars ⇒ 1 call, one summary system message."""
    llm = ScriptedLLM([text("Summary of old conversation.")])
    result = await ContextGuard(400, llm=llm).check_and_compact(alternating(10))
    assert len(llm.calls) == 1
    assert len([m for m in result if m.role == "system"]) == 1
    assert summaries(result)[0].content == "[Conversation summary]: Summary of old conversation."
    assert result[1:] == alternating(10)[-4:]


async def test_summarizer_gets_role_prefixed_lines_of_the_old_messages() -> None:
    """S71: [system: hint prompt, user: "Role: text" lines of the old messages]."""
    llm = ScriptedLLM([text("S.")])
    history = alternating(10)
    await ContextGuard(400, llm=llm).check_and_compact(history)
    system, user = llm.calls[0].messages
    assert system.content == HINT_PROMPTS["general"]
    assert user.content == "\n".join(
        f"{m.role.capitalize()}: {m.content}" for m in history[:6])


async def test_analysis_block_is_stripped_from_the_summary() -> None:
    """S71: <analysis>…</analysis> never reaches the conversation."""
    llm = ScriptedLLM([text("<analysis>\nthinking...\n</analysis>\nThe real summary.")])
    result = await ContextGuard(400, llm=llm).check_and_compact(alternating(10))
    assert summaries(result)[0].content == "[Conversation summary]: The real summary."


async def test_truncation_without_a_compaction_llm() -> None:
    """S70 T-K1: no LLM, budget 100 ⇒ fewer messages."""
    result = await ContextGuard(100).check_and_compact(alternating(10))
    assert len(result) < 10


@pytest.mark.parametrize("reply", [RuntimeError("llm down"), text(""), text("  ")],
                         ids=["raises", "empty", "blank"])
async def test_failed_compaction_silently_falls_back_to_truncation(reply: object) -> None:
    """S71 T-K1: LLM raising or returning '' ⇒ 1 call, fewer messages, no summary."""
    llm = ScriptedLLM([reply])  # type: ignore[list-item]
    result = await ContextGuard(400, llm=llm).check_and_compact(alternating(10))
    assert len(llm.calls) == 1
    assert 0 < len(result) < 10
    assert summaries(result) == []


async def test_few_compactable_messages_are_truncated_not_summarized() -> None:
    """S71: compactable ≤ 4 ⇒ smart_truncate, no LLM call."""
    llm = ScriptedLLM([])
    history = [msg("system", "s"), *alternating(4, size=2000)]
    result = await ContextGuard(400, llm=llm).check_and_compact(history)
    assert llm.calls == [] and len(result) < len(history)


async def test_summary_still_over_budget_is_truncated_further() -> None:
    """S71: if the compacted list is still too long it is smart-truncated, summary kept."""
    llm = ScriptedLLM([text("Summary.")])
    result = await ContextGuard(200, llm=llm).check_and_compact(alternating(10))
    assert estimate_messages(result) <= 200
    assert len(summaries(result)) == 1


# --- pinned messages (T-K2, T-K3) ------------------------------------------------------------


def pinned_history() -> list[ChatMessage]:
    """T-K2: system, pinned task, then 9 long/short alternating messages."""
    body = [msg(("user", "assistant")[i % 2], ("L" if i % 2 else "s") * (600 if i % 2 else 40))
            for i in range(9)]
    return [msg("system", "You are an agent."),
            msg("user", "My task is X. UNIQUE-PIN-7f3a", pinned=True), *body]


async def test_pinned_message_survives_compaction_unchanged() -> None:
    """S75 T-K2: budget 200 ⇒ pinned kept as is, a system message remains, one summary."""
    llm = ScriptedLLM([text("Summary of old conversation.")])
    history = pinned_history()
    result = await ContextGuard(200, llm=llm).check_and_compact(history)
    pinned = [m for m in result if m.pinned]
    assert pinned == [history[1]]
    assert any(m.role == "system" and m.content == "You are an agent." for m in result)
    assert len(summaries(result)) == 1


async def test_pinned_text_never_reaches_the_summarizer() -> None:
    """S75 T-K2: the unique pinned string is absent from what the summarizer sees."""
    llm = ScriptedLLM([text("Summary.")])
    await ContextGuard(200, llm=llm).check_and_compact(pinned_history())
    sent = "\n".join(m.text() for m in llm.calls[0].messages)
    assert "UNIQUE-PIN-7f3a" not in sent


async def test_heavy_pins_are_unpinned_except_the_newest_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """S71 T-K3: two 2000-char pins, 10 small messages, budget 100 ⇒ warning; newest stays."""
    old_pin = msg("user", "OLDPIN " + "o" * 1993, pinned=True)
    new_pin = msg("user", "NEWPIN " + "n" * 1993, pinned=True)
    history = [old_pin, new_pin, *alternating(10, size=20)]
    llm = ScriptedLLM([text("Summary.")])
    with caplog.at_level(logging.WARNING):
        result = await ContextGuard(100, llm=llm).check_and_compact(history)
    assert "pinned messages consume" in caplog.text
    assert "OLDPIN" in llm.calls[0].messages[1].text()  # released into the summary pool
    assert "NEWPIN" not in llm.calls[0].messages[1].text()
    assert [m for m in result if m.pinned] == [new_pin]
    assert old_pin.pinned is True  # the caller's message was not mutated


async def test_a_single_heavy_pin_is_never_unpinned(caplog: pytest.LogCaptureFixture) -> None:
    """S71: the 50% rule needs more than one pinned message."""
    history = [msg("user", "p" * 2000, pinned=True), *alternating(10, size=20)]
    llm = ScriptedLLM([text("Summary.")])
    with caplog.at_level(logging.WARNING):
        result = await ContextGuard(100, llm=llm).check_and_compact(history)
    assert "pinned messages consume" not in caplog.text
    assert result[0] == history[0]


async def test_compaction_does_not_mutate_its_input() -> None:
    """S70: check_and_compact returns a new list and leaves messages untouched."""
    history = [msg("user", "a" * 3000, pinned=True), msg("user", "b" * 3000, pinned=True),
               *alternating(10)]
    snapshot = [m.model_copy(deep=True) for m in history]
    await ContextGuard(100, llm=ScriptedLLM([text("S.")]), max_message_chars=1000
                       ).check_and_compact(history)
    assert history == snapshot


# --- hint prompts (S72) ----------------------------------------------------------------------


@pytest.mark.parametrize("hint",
                         ["react_iteration", "planner_input", "step_dependency", "general"])
async def test_summarizer_system_prompt_is_the_hints_prompt(hint: str) -> None:
    """S72 T-K3: each hint selects its own prompt."""
    llm = ScriptedLLM([text("S.")])
    await ContextGuard(400, llm=llm).check_and_compact(alternating(10), hint=hint)
    assert llm.calls[0].messages[0].content == HINT_PROMPTS[hint]


async def test_unknown_hint_uses_the_general_prompt() -> None:
    """S72 T-K3: unknown hint ⇒ general."""
    llm = ScriptedLLM([text("S.")])
    await ContextGuard(400, llm=llm).check_and_compact(alternating(10), hint="nope")
    assert llm.calls[0].messages[0].content == HINT_PROMPTS["general"]


async def test_custom_compact_prompt_overrides_every_hint() -> None:
    """S72: an agent-level custom compact prompt overrides all hints."""
    llm = ScriptedLLM([text("S.")])
    guard = ContextGuard(400, llm=llm, compact_prompt="Custom summary rules.")
    await guard.check_and_compact(alternating(10), hint="react_iteration")
    assert llm.calls[0].messages[0].content == "Custom summary rules."


def test_react_iteration_prompt_asks_for_nine_sections() -> None:
    """S72: primary request … next step, nine numbered sections."""
    prompt = HINT_PROMPTS["react_iteration"].lower()
    for section in ("primary request", "key concepts", "files", "errors", "problem solving",
                    "user messages", "pending tasks", "current work", "next step"):
        assert section in prompt
    assert "9." in prompt


def test_every_hint_prompt_says_to_use_the_conversations_language() -> None:
    """S72: all prompts say to write in the conversation's language."""
    for prompt in HINT_PROMPTS.values():
        assert "same language as the conversation" in prompt


async def test_compaction_usage_is_recorded_on_the_guard() -> None:
    """S18: compaction usage is kept apart from the loop's usage."""
    llm = FunctionLLM(lambda m, k: text("S.", usage={"prompt_tokens": 7, "completion_tokens": 3}))
    guard = ContextGuard(400, llm=llm)
    await guard.check_and_compact(alternating(10))
    assert guard.usage.total_tokens == 10


# --- a history checked turn after turn ------------------------------------------------------


async def test_a_growing_history_is_judged_as_a_fresh_guard_judges_it() -> None:
    """The guard remembers what it capped and counted; each turn's answer is still the one a
    guard that never saw the history gives (under and over the budget, capped messages)."""
    system = msg("system", "You help.")
    history: list[ChatMessage] = [system, msg("user", "q" * 2000)]
    kept = ContextGuard(1000, max_message_chars=1000)
    for i in range(12):
        out = await kept.check_and_compact(history)
        fresh = await ContextGuard(1000, max_message_chars=1000).check_and_compact(list(history))
        assert out == fresh and out is not history
        history = out + [msg("assistant", f"a{i}".ljust(300, "y"))]  # as the engine appends
    assert len(history) < 13  # the budget was reached on the way: the history was truncated


async def test_a_history_changed_before_its_end_is_counted_again() -> None:
    """Only a history that starts with the very messages checked before reuses their count."""
    system = msg("system", "You help.")
    guard = ContextGuard(200)
    short = [system, msg("user", "a" * 40), msg("assistant", "b" * 40)]
    assert await guard.check_and_compact(short) == short
    replaced = [system, msg("user", "a" * 900), msg("assistant", "b" * 40)]  # same length, other middle
    assert await guard.check_and_compact(replaced) == smart_truncate(replaced, 200)
    assert await guard.check_and_compact(short[:2]) == short[:2]  # shorter than what was seen
