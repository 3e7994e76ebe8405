"""Tool selection before the loop.

When the registry holds more tools than the threshold, one cheap structured call picks
the relevant ones from a compact catalog (names and one-line descriptions, no schemas).
Selection is an optimisation, never a gate: any failure means "use the full registry",
signalled by ``None`` — but a call a dollar cap refused (``CostCapReached``) is no failure of
selection: it ends the run's calls, so it is raised. The ``phase`` event is the caller's
business.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable, Sequence
from typing import Any

from reactq.shared.errors import CostCapReached
from reactq.shared.llm.base import LLM
from reactq.shared.models import ChatMessage
from reactq.shared.tools.base import Tool, ToolRegistry

from .structured import structured_llm_call

__all__ = [
    "SELECTION_SCHEMA",
    "SELECTION_SYSTEM_PROMPT",
    "compact_catalog",
    "keyword_select",
    "needs_selection",
    "select_tools",
]

logger = logging.getLogger(__name__)

SELECTION_SYSTEM_PROMPT = "You are a tool selection assistant. Respond only with JSON."
SELECTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"tools": {"type": "array", "items": {"type": "string"}}},
    "required": ["tools"],
}
_FUNCTION_NAME = "select_tools"
_NEWLINES = re.compile(r"\r\n|\r|\n")
_NON_ALNUM = re.compile(r"[^a-z0-9]+")
# Common English words that say nothing about which tool fits a query.
_STOP_WORDS = frozenset("""
    a an and are as at be but by can could do does for from get give has have how i if in
    into is it its me my of on or our please show should so than that the their them then
    there these this to up us use using was we what when where which who why will with
    would you your about all any also just more most need some want tell find make
""".split())


def needs_selection(registry_size: int, threshold: int = 12) -> bool:
    """Selection runs only when there are strictly more tools than ``threshold``."""
    return registry_size > threshold


def compact_catalog(registry: Iterable[Tool], desc_length: int = 80) -> str:
    """One ``- name: description`` line per tool, descriptions cut to ``desc_length``."""
    return "\n".join(
        f"- {tool.name}: {_short_description(tool.description, desc_length)}"
        for tool in registry
    )


async def select_tools(
    llm: LLM,
    query: str,
    registry: ToolRegistry,
    *,
    max_tools: int = 6,
    pinned: Sequence[str] = ("read_skill",),
    desc_length: int = 80,
    keyword_shortcut: bool = False,
) -> list[str] | None:
    """Names of the tools to offer for ``query``, in registration order.

    ``None`` means "use the full registry". Never raises, except cancellation and
    ``CostCapReached``.
    """
    if keyword_shortcut:
        shortcut = keyword_select(query, registry, max_tools=max_tools)
        if shortcut:
            return _with_pins(registry, shortcut, pinned)
    try:
        names = await _ask_llm(llm, query, registry, max_tools, desc_length)
    except (asyncio.CancelledError, CostCapReached):
        raise
    except Exception as exc:  # noqa: BLE001 — a failed selection is never fatal.
        logger.warning("Tool selection failed, using the full registry: %s", exc)
        return None
    if not names:
        return None
    return _with_pins(registry, names, pinned)


async def _ask_llm(llm: LLM, query: str, registry: ToolRegistry, max_tools: int,
                   desc_length: int) -> list[str] | None:
    """The structured call; returns the known names it chose, or ``None``."""
    messages = [
        ChatMessage(role="system", content=SELECTION_SYSTEM_PROMPT),
        ChatMessage(role="user", content=_selection_prompt(query, registry, max_tools,
                                                           desc_length)),
    ]
    result = await structured_llm_call(llm, messages, SELECTION_SCHEMA, _FUNCTION_NAME,
                                       default_value=None)
    return _known_names(result.value, registry, max_tools)


def _selection_prompt(query: str, registry: ToolRegistry, max_tools: int,
                      desc_length: int) -> str:
    return (
        "Select the tools that are relevant to the user's query. "
        f"Choose at most {max_tools} tools, only from the catalog below.\n\n"
        f"User query:\n{query}\n\n"
        f"Tool catalog:\n{compact_catalog(registry, desc_length)}\n\n"
        f'Respond with a JSON object of the form {{"tools": ["tool_name", ...]}} '
        f"listing at most {max_tools} tool names."
    )


def _known_names(value: Any, registry: ToolRegistry, max_tools: int) -> list[str] | None:
    """Only the first ``max_tools`` names count; unknown names are dropped."""
    if not isinstance(value, dict):
        return None
    tools = value.get("tools")
    if not isinstance(tools, list) or not tools:
        return None
    known = [n for n in tools[:max_tools] if isinstance(n, str) and n in registry]
    return known or None


def _with_pins(registry: ToolRegistry, names: Iterable[str],
               pinned: Sequence[str]) -> list[str]:
    """Add back pinned tools that exist; keep the registry's own order."""
    wanted = set(names) | {p for p in pinned if p in registry}
    return [name for name in registry.names() if name in wanted]


def _short_description(description: str, desc_length: int) -> str:
    flat = _NEWLINES.sub(" ", description or "")
    if len(flat) > desc_length:
        return flat[: max(desc_length - 3, 0)] + "..."
    return flat


def keyword_select(query: str, registry: ToolRegistry, *, max_tools: int = 6) -> list[str]:
    """Tools whose words clearly dominate the query's, or ``[]`` if unclear."""
    words = _keywords(query)
    if not words:
        return []
    scores = {t.name: len(words & _keywords(f"{t.name} {t.description}")) for t in registry}
    top = max(scores.values(), default=0)
    runner_up = max((s for s in scores.values() if s < top), default=None)
    if top < 2 or (runner_up is not None and top <= 2 * runner_up):
        return []
    return [name for name, score in scores.items() if score == top][:max_tools]


def _keywords(text: str) -> set[str]:
    tokens = _NON_ALNUM.split(text.lower())
    return {t for t in tokens if len(t) > 1 and t not in _STOP_WORDS}
