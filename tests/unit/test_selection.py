"""Tool selection before the loop (SPEC §C, S29–S34), at the select_tools level."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel

from reactq.shared.engine.selection import (
    SELECTION_SCHEMA,
    compact_catalog,
    keyword_select,
    needs_selection,
    select_tools,
)
from reactq.shared.llm.testing import ScriptedLLM, text, tool_calls
from reactq.shared.tools.base import Tool, ToolRegistry


class NoArgs(BaseModel):
    pass


def make_tool(name: str, description: str) -> Tool:
    return Tool(name=name, description=description, args_model=NoArgs, fn=lambda: "")


def thirteen_tools(*extra: Tool) -> ToolRegistry:
    """T-C2's registry: tool_0..tool_12, each "Description for tool N."."""
    tools = [make_tool(f"tool_{i}", f"Description for tool {i}.") for i in range(13)]
    return ToolRegistry([*tools, *extra])


def tools_reply(*names: str) -> str:
    return json.dumps({"tools": list(names)})


# --- threshold -----------------------------------------------------------------------------


@pytest.mark.parametrize(("size", "expected"), [(1, False), (12, False), (13, True)])
def test_selection_runs_only_above_twelve_tools(size: int, expected: bool) -> None:
    """S29: selection only when the registry holds more than 12 tools."""
    assert needs_selection(size) is expected


def test_threshold_is_configurable() -> None:
    """S29: the threshold comes from REACT_TOOL_SELECTION_THRESHOLD."""
    assert needs_selection(4, threshold=3) and not needs_selection(3, threshold=3)


# --- LLM path ------------------------------------------------------------------------------


async def test_selected_names_come_back_from_one_llm_call() -> None:
    """S31 T-C2: 13 tools, the LLM picks tool_0 and tool_1 ⇒ exactly those, one call."""
    llm = ScriptedLLM([text(tools_reply("tool_0", "tool_1"))])
    assert await select_tools(llm, "test query", thirteen_tools()) == ["tool_0", "tool_1"]
    assert len(llm.calls) == 1


async def test_selection_request_has_the_fixed_system_prompt_and_catalog() -> None:
    """S31: system + user prompt with the query, the compact catalog and 'at most 6'."""
    registry = thirteen_tools()
    llm = ScriptedLLM([text(tools_reply("tool_3"))])
    await select_tools(llm, "test query", registry)
    system, user = llm.calls[0].messages
    assert system.role == "system"
    assert system.content == "You are a tool selection assistant. Respond only with JSON."
    assert user.role == "user"
    assert "test query" in user.text()
    assert compact_catalog(registry) in user.text()
    assert "at most 6" in user.text()


async def test_native_selection_uses_the_select_tools_function_and_schema() -> None:
    """S31: function_name "select_tools", schema {"tools": [string]} required."""
    llm = ScriptedLLM([tool_calls(("c1", "select_tools", {"tools": ["tool_2"]}))],
                      abilities={"tool_call": True})
    assert await select_tools(llm, "test query", thirteen_tools()) == ["tool_2"]
    function = llm.calls[0].kwargs["tools"][0]["function"]
    assert function["name"] == "select_tools"
    assert function["parameters"] == SELECTION_SCHEMA == {
        "type": "object",
        "properties": {"tools": {"type": "array", "items": {"type": "string"}}},
        "required": ["tools"],
    }


async def test_registration_order_is_kept_whatever_order_the_llm_uses() -> None:
    """S33: the filtered registry keeps original registration order."""
    llm = ScriptedLLM([text(tools_reply("tool_9", "tool_2", "tool_5"))])
    selected = await select_tools(llm, "test query", thirteen_tools())
    assert selected == ["tool_2", "tool_5", "tool_9"]


async def test_only_the_first_six_names_are_considered() -> None:
    """S33 T-C3: 11 names ⇒ capped at the first 6."""
    names = [f"tool_{i}" for i in (12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2)]
    llm = ScriptedLLM([text(tools_reply(*names))])
    selected = await select_tools(llm, "test query", thirteen_tools())
    assert selected == ["tool_7", "tool_8", "tool_9", "tool_10", "tool_11", "tool_12"]


async def test_max_tools_is_configurable() -> None:
    """S33: REACT_TOOL_SELECTION_MAX caps the names considered, and the prompt says so."""
    llm = ScriptedLLM([text(tools_reply("tool_0", "tool_1", "tool_2"))])
    selected = await select_tools(llm, "test query", thirteen_tools(), max_tools=2)
    assert selected == ["tool_0", "tool_1"]
    assert "at most 2" in llm.calls[0].messages[1].text()


async def test_unknown_names_are_dropped() -> None:
    """S33: names not in the registry are ignored when others are valid."""
    llm = ScriptedLLM([text(tools_reply("ghost", "tool_4"))])
    assert await select_tools(llm, "test query", thirteen_tools()) == ["tool_4"]


async def test_pinned_read_skill_is_added_back_when_present() -> None:
    """S34: read_skill is re-added if the LLM left it out."""
    registry = thirteen_tools(make_tool("read_skill", "Read a skill."))
    llm = ScriptedLLM([text(tools_reply("tool_1"))])
    assert await select_tools(llm, "test query", registry) == ["tool_1", "read_skill"]


async def test_agent_pinned_tools_are_added_back_in_registration_order() -> None:
    """S34: the agent's pinned_tools (e.g. web_search) join read_skill; absent pins are ignored."""
    registry = ToolRegistry([make_tool("web_search", "Search the web."), *thirteen_tools()])
    llm = ScriptedLLM([text(tools_reply("tool_1"))])
    selected = await select_tools(llm, "test query", registry,
                                  pinned=("read_skill", "web_search", "absent"))
    assert selected == ["web_search", "tool_1"]


# --- fallbacks -----------------------------------------------------------------------------


async def test_unparseable_replies_fall_back_to_the_full_registry() -> None:
    """S33 T-C3: plain LLM, "not json" then "still not json" ⇒ 2 calls, None (full registry)."""
    llm = ScriptedLLM([text("not json"), text("still not json")])
    assert await select_tools(llm, "test query", thirteen_tools()) is None
    assert len(llm.calls) == 2


@pytest.mark.parametrize(
    "reply",
    [
        tools_reply(),
        tools_reply("nonexistent_tool"),
        json.dumps({"tools": "tool_0"}),
        json.dumps({"tools": [1, 2]}),
        json.dumps({"other": ["tool_0"]}),
    ],
    ids=["empty-list", "nonexistent", "not-a-list", "not-strings", "missing-key"],
)
async def test_useless_selections_fall_back_to_the_full_registry(reply: str) -> None:
    """S33 T-C3: empty list, only unknown names or a wrong shape ⇒ None."""
    llm = ScriptedLLM([text(reply)], repeat_last=True)
    assert await select_tools(llm, "test query", thirteen_tools()) is None


async def test_llm_exceptions_fall_back_to_the_full_registry() -> None:
    """S33: an exception from the LLM is never fatal."""
    llm = ScriptedLLM([RuntimeError("provider down")], repeat_last=True,
                      abilities={"json_mode": True})
    assert await select_tools(llm, "test query", thirteen_tools()) is None


async def test_unexpected_errors_fall_back_to_the_full_registry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """S33: any exception, even outside the LLM call, ⇒ None."""
    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("bug")

    monkeypatch.setattr("reactq.shared.engine.selection.structured_llm_call", broken)
    llm = ScriptedLLM([])
    assert await select_tools(llm, "test query", thirteen_tools()) is None


async def test_cancellation_propagates() -> None:
    """S33: fallback covers errors, not cancellation of the run."""
    llm = ScriptedLLM([asyncio.CancelledError()])
    with pytest.raises(asyncio.CancelledError):
        await select_tools(llm, "test query", thirteen_tools())


# --- compact catalog -----------------------------------------------------------------------


def test_compact_catalog_has_one_line_per_tool() -> None:
    """S32: "- name: description" per tool, in registration order."""
    registry = ToolRegistry([make_tool("a", "First."), make_tool("b", "Second.")])
    assert compact_catalog(registry) == "- a: First.\n- b: Second."


def test_long_descriptions_are_cut_to_77_chars_plus_ellipsis() -> None:
    """S32: over 80 chars ⇒ first 77 + '...'; exactly 80 is kept whole."""
    registry = ToolRegistry([make_tool("long", "x" * 81), make_tool("edge", "y" * 80)])
    lines = compact_catalog(registry).split("\n")
    assert lines[0] == "- long: " + "x" * 77 + "..."
    assert lines[1] == "- edge: " + "y" * 80


def test_newlines_in_descriptions_become_spaces() -> None:
    """S32: a multi-line description stays on its catalog line."""
    registry = ToolRegistry([make_tool("m", "line one\nline two\r\nline three")])
    assert compact_catalog(registry) == "- m: line one line two line three"


def test_empty_registry_gives_an_empty_catalog() -> None:
    """S32: empty registry ⇒ ""."""
    assert compact_catalog(ToolRegistry()) == ""


def test_catalog_description_length_is_configurable() -> None:
    """S32: COMPACT_CATALOG_DESC_LENGTH sets the cut."""
    registry = ToolRegistry([make_tool("t", "abcdefghijkl")])
    assert compact_catalog(registry, desc_length=10) == "- t: abcdefg..."


# --- keyword shortcut [U] ------------------------------------------------------------------


def keyword_registry() -> ToolRegistry:
    return ToolRegistry([
        make_tool("weather_forecast", "Get the weather forecast for a city."),
        make_tool("stock_price", "Look up the current stock price of a ticker."),
        make_tool("send_email", "Send an email message to a recipient."),
        *[make_tool(f"misc_{i}", f"Miscellaneous helper number {i}.") for i in range(11)],
    ])


async def test_keyword_shortcut_is_off_by_default() -> None:
    """S30 [U]: without the flag the LLM is always asked."""
    llm = ScriptedLLM([text(tools_reply("send_email"))])
    selected = await select_tools(llm, "weather forecast for Paris", keyword_registry())
    assert selected == ["send_email"] and len(llm.calls) == 1


async def test_clear_keyword_winner_skips_the_llm_call() -> None:
    """S30 [U]: top score ≥ 2 and > 2× runner-up ⇒ no LLM call."""
    llm = ScriptedLLM([])
    selected = await select_tools(llm, "What is the weather forecast for Paris?",
                                  keyword_registry(), keyword_shortcut=True)
    assert selected == ["weather_forecast"]
    assert llm.calls == []


async def test_weak_keyword_overlap_falls_through_to_the_llm() -> None:
    """S30 [U]: a top score below 2 is not trusted."""
    llm = ScriptedLLM([text(tools_reply("stock_price"))])
    selected = await select_tools(llm, "forecast Paris", keyword_registry(), keyword_shortcut=True)
    assert selected == ["stock_price"] and len(llm.calls) == 1


def test_keyword_ties_at_the_top_are_all_selected() -> None:
    """S30 [U]: every tool tied at the top score is selected."""
    registry = ToolRegistry([
        make_tool("alpha", "invoice ledger tools"),
        make_tool("beta", "ledger invoice export"),
        make_tool("gamma", "unrelated"),
    ])
    assert keyword_select("the invoice ledger", registry) == ["alpha", "beta"]


def test_keyword_runner_up_too_close_means_no_shortcut() -> None:
    """S30 [U]: top must exceed twice the runner-up."""
    registry = ToolRegistry([
        make_tool("alpha", "invoice ledger export"),
        make_tool("beta", "ledger only"),
    ])
    assert keyword_select("invoice ledger export", registry) == ["alpha"]
    assert keyword_select("invoice ledger", registry) == []


def test_stop_words_and_single_letters_never_score() -> None:
    """S30 [U]: stop words and 1-char tokens are removed before scoring."""
    registry = ToolRegistry([make_tool("t", "the and for with a b c")])
    assert keyword_select("the and for with a b c", registry) == []

