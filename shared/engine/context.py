"""The context guard: token estimates, truncation and LLM compaction.

Everything here returns new lists and never mutates the messages it is given, because
the same message objects live in the run state that is persisted between steps.

Pinned messages (the current query, ``[USER INTERRUPT]`` messages) and system messages
always survive; pinned ones are never shown to the summarizer, except when they alone
eat more than half the budget.
"""

from __future__ import annotations

import json
import logging
import operator
import re
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from reactq.shared.engine import billing
from reactq.shared.engine.jsonx import text_json
from reactq.shared.errors import CostCapReached
from reactq.shared.llm.base import LLM
from reactq.shared.models import ChatMessage, Usage

__all__ = [
    "HINT_PROMPTS",
    "SUMMARY_PREFIX",
    "ContextGuard",
    "budget_for",
    "estimate_messages",
    "estimate_tokens",
    "smart_truncate",
]

logger = logging.getLogger(__name__)

SUMMARY_PREFIX = "[Conversation summary]: "
TRUNCATED_SUFFIX = "\n[Truncated]"
IMAGE_TOKENS = 765
MESSAGE_OVERHEAD = 4
_ANALYSIS = re.compile(r"<analysis>.*?</analysis>", re.DOTALL | re.IGNORECASE)
_SUMMARY_TAG = re.compile(r"<summary>(.*?)</summary>", re.DOTALL | re.IGNORECASE)

_REPLY_RULES = (
    "Reply with ONLY the summary text — no JSON.\n"
    "Write the summary in the same language as the conversation."
)

HINT_PROMPTS: dict[str, str] = {
    "react_iteration": (
        "You are compacting the history of an agent that is still working on a task "
        "with tools. Write a summary that lets it continue without losing its place.\n"
        "You may first think inside <analysis>...</analysis>; that part is discarded.\n"
        "Then write the summary with exactly these 9 sections:\n"
        "1. Primary request and intent: what the user asked for, in full.\n"
        "2. Key concepts: technical concepts, entities and constraints involved.\n"
        "3. Files and code: files, code, data or resources examined or produced, "
        "with the important details.\n"
        "4. Errors and fixes: errors met and how they were resolved.\n"
        "5. Problem solving: what was tried, what worked, key tool results and numbers.\n"
        "6. All user messages: every message the user sent, including follow-ups.\n"
        "7. Pending tasks: what is still left to do.\n"
        "8. Current work: what was being done right before this summary.\n"
        "9. Next step: the next step to take, in line with the user's request.\n"
        + _REPLY_RULES
    ),
    "planner_input": (
        "Summarise the following conversation history as context for a task planner.\n"
        "Preserve how the user's intent evolved, key decisions, conclusions and data from "
        "earlier turns, and every constraint the user stated.\n"
        "Drop greetings, filler, tool-call mechanics and reasoning that does not change "
        "the plan.\n" + _REPLY_RULES
    ),
    "step_dependency": (
        "Summarise the following results of earlier steps for a downstream task step.\n"
        "Preserve key data, numbers, conclusions and actionable outputs.\n"
        "Drop the reasoning process, failed attempts, repetition and verbose "
        "formatting.\n" + _REPLY_RULES
    ),
    "general": (
        "Summarise the following conversation history into a concise paragraph.\n"
        "Preserve key facts, decisions, tool results and any data the user or assistant "
        "referred to, including descriptions of shared images.\n"
        "Drop greetings, filler and redundant back-and-forth.\n" + _REPLY_RULES
    ),
}


def estimate_tokens(text: str | None) -> int:
    """ASCII chars / 4 + other chars / 1.5, truncated; at least 1 if non-empty."""
    if not text:
        return 0
    # Counted in C, not per character in Python: the guard estimates the whole history
    # on every turn.
    ascii_chars = len(text) if text.isascii() else len(text.encode("ascii", "ignore"))
    tokens = ascii_chars / 4.0 + (len(text) - ascii_chars) / 1.5
    return max(1, int(tokens))


def estimate_messages(messages: Sequence[ChatMessage]) -> int:
    """Estimated tokens of a message list: content, tool calls, +4 per message."""
    return sum(_message_tokens(m) for m in messages)


def smart_truncate(messages: Sequence[ChatMessage], max_tokens: int) -> list[ChatMessage]:
    """Keep system and pinned messages plus the longest recent suffix that fits."""
    if estimate_messages(messages) <= max_tokens:
        return list(messages)
    head = [m for m in messages if _always_kept(m)]
    room = max_tokens - estimate_messages(head)
    suffix: list[ChatMessage] = []
    for message in reversed([m for m in messages if not _always_kept(m)]):
        cost = _message_tokens(message)
        if cost > room:
            break
        suffix.append(message)
        room -= cost
    suffix.reverse()
    return head + _drop_orphans(suffix, head_has_turns=any(m.role != "system" for m in head))


def budget_for(context_size: int | None, max_output: int | None, floor: int = 4000,
               default: int = 64000) -> int:
    """The input budget of a model, ``context_size - max_output`` but at least ``floor``."""
    if not context_size or max_output is None:
        return default
    return max(floor, context_size - max_output)


class ContextGuard:
    """Keeps a conversation inside a token budget.

    ``llm`` is the (fast) compaction model; without it, over-budget histories are
    truncated. ``usage`` accumulates what compaction calls cost.
    """

    def __init__(
        self,
        budget: int = 32000,
        *,
        llm: LLM | None = None,
        max_message_chars: int = 50000,
        keep_recent: int = 4,
        compact_prompt: str | None = None,
    ) -> None:
        self.budget = budget
        self.llm = llm
        self.max_message_chars = max_message_chars
        self.keep_recent = keep_recent
        self.compact_prompt = compact_prompt
        self.usage = Usage()
        self._checked = _Checked()

    async def check_and_compact(self, messages: Sequence[ChatMessage],
                                budget: int | None = None,
                                hint: str = "general") -> list[ChatMessage]:
        """Cap huge messages, then compact only if the estimate exceeds the budget."""
        limit = budget or self.budget
        capped, tokens = self._checked.capped(messages, self._cap)
        if tokens <= limit:
            return capped
        if self.llm is None:
            return smart_truncate(capped, limit)
        return await self._compact(capped, limit, hint)

    def prompt_for(self, hint: str) -> str:
        """The summarizer's system prompt; a custom prompt overrides every hint."""
        if self.compact_prompt:
            return self.compact_prompt
        return HINT_PROMPTS.get(hint, HINT_PROMPTS["general"])

    def _cap(self, message: ChatMessage) -> ChatMessage:
        """A copy cut to ``max_message_chars``; vision arrays are left alone."""
        content = message.content
        if not isinstance(content, str) or len(content) <= self.max_message_chars:
            return message
        cut = content[: self.max_message_chars] + TRUNCATED_SUFFIX
        return message.model_copy(update={"content": cut})

    async def _compact(self, messages: list[ChatMessage], budget: int,
                       hint: str) -> list[ChatMessage]:
        """Summarize old compactable messages; keep system, pinned and recent ones."""
        system = [m for m in messages if m.role == "system"]
        pinned = [m for m in messages if m.pinned and m.role != "system"]
        compactable = [m for m in messages if m.role != "system" and not m.pinned]
        if len(compactable) <= self.keep_recent:
            return smart_truncate(messages, budget)
        pinned, compactable = _unpin_overflow(pinned, compactable, budget)
        old, recent = _split_whole_turns(compactable, self.keep_recent)
        if not old:
            return smart_truncate(messages, budget)
        summary = await self._summarize(old, hint)
        if not summary:
            return smart_truncate(messages, budget)
        note = ChatMessage(role="system", content=f"{SUMMARY_PREFIX}{summary}")
        compacted = [*system, *pinned, note, *recent]
        if estimate_messages(compacted) > budget:
            return smart_truncate(compacted, budget)
        return compacted

    async def _summarize(self, old: list[ChatMessage], hint: str) -> str:
        """The summary text, or ``""`` when the compaction LLM fails (caller truncates)."""
        assert self.llm is not None
        request = [
            ChatMessage(role="system", content=self.prompt_for(hint)),
            ChatMessage(role="user", content=_transcript(old)),
        ]
        try:
            result = await self.llm.chat(request)
        except CostCapReached:
            raise  # a dollar cap refused the call: the run's calls end here
        except Exception as exc:  # noqa: BLE001 — compaction failure degrades to truncation.
            logger.info("Context compaction failed, truncating instead: %s", exc)
            return ""
        self.usage = self.usage + Usage.from_dict(result.usage)
        billing.charge(result.usage)
        return _clean_summary(result.message.text())


class _Checked:
    """Histories checked before (capped copy, token estimate), so that one that only grew
    since is capped and counted for its new messages only.

    The guard runs before every LLM call; going over the whole history every time made a
    turn's cost grow with the history. A history is recognised by its first message (the
    system prompt; the entry holds it, so its id is not reused while the entry lives) and
    continues an entry only if it starts with the very message objects of that entry.
    A few conversations are remembered (the newest).
    """

    SIZE = 4

    def __init__(self) -> None:
        self._entries: OrderedDict[int, tuple[list[ChatMessage], int]] = OrderedDict()

    def capped(self, messages: Sequence[ChatMessage],
               cap: Callable[[ChatMessage], ChatMessage]) -> tuple[list[ChatMessage], int]:
        """(a new list of the messages cut to the cap, its estimate)."""
        if not messages:
            return [], 0
        key = id(messages[0])
        known, tokens = self._entries.get(key, ((), 0))
        if len(known) > len(messages) or not all(map(operator.is_, known, messages)):
            known, tokens = (), 0
        fresh = [cap(m) for m in messages[len(known):]]
        tokens += sum(_message_tokens(m) for m in fresh)
        out = [*known, *fresh]
        self._entries[key] = (list(out), tokens)  # a copy: the caller may append to ``out``
        self._entries.move_to_end(key)
        if len(self._entries) > self.SIZE:
            self._entries.popitem(last=False)
        return out, tokens


def _split_whole_turns(compactable: list[ChatMessage],
                       keep: int) -> tuple[list[ChatMessage], list[ChatMessage]]:
    """the "last ``keep``", moved back so that the kept part does not start with tool
    results whose assistant call would be summarized away (providers refuse a tool
    message that answers no call)."""
    split = max(0, len(compactable) - keep)
    while split > 0 and compactable[split].role == "tool":
        split -= 1
    return compactable[:split], compactable[split:]


def _unpin_overflow(pinned: list[ChatMessage], compactable: list[ChatMessage],
                    budget: int) -> tuple[list[ChatMessage], list[ChatMessage]]:
    """When pins eat over half the budget, only the newest pin stays pinned."""
    pinned_tokens = estimate_messages(pinned)
    if pinned_tokens <= budget * 0.5 or len(pinned) <= 1:
        return pinned, compactable
    logger.warning(
        "ContextGuard: pinned messages consume %d tokens (%.0f%% of budget %d); "
        "unpinning all but the most recent pinned message",
        pinned_tokens, 100.0 * pinned_tokens / budget, budget,
    )
    released = [m.model_copy(update={"pinned": False}) for m in pinned[:-1]]
    return pinned[-1:], released + compactable


def _transcript(messages: Sequence[ChatMessage]) -> str:
    """``Role: text`` lines; tool calls are spelled out so the summary can mention them."""
    lines = []
    for message in messages:
        text = _content_text(message.content)
        if message.tool_calls:
            calls = ", ".join(f"{c.name}({json.dumps(c.arguments, ensure_ascii=False)})"
                              for c in message.tool_calls)
            text = f"{text} [tool calls: {calls}]".strip()
        lines.append(f"{message.role.capitalize()}: {text}")
    return "\n".join(lines)


def _clean_summary(text: str) -> str:
    """Drop the model's ``<analysis>`` scratchpad; unwrap a ``<summary>`` block."""
    text = _ANALYSIS.sub("", text)
    wrapped = _SUMMARY_TAG.search(text)
    if wrapped:
        text = wrapped.group(1)
    return text.strip()


def _content_text(content: str | list[dict[str, Any]] | None) -> str:
    """Plain text of a content value; images become a short note."""
    if not content:
        return ""
    if isinstance(content, str):
        return content
    texts = [str(p.get("text", "")) for p in content if p.get("type") == "text"]
    images = sum(1 for p in content if p.get("type") == "image_url")
    if images:
        texts.append(f"[{images} image(s) attached]")
    return " ".join(texts)


def _content_tokens(content: str | list[dict[str, Any]] | None) -> int:
    if not content:
        return 0
    if isinstance(content, str):
        return estimate_tokens(content)
    return sum(
        estimate_tokens(str(p.get("text", ""))) if p.get("type") == "text"
        else IMAGE_TOKENS if p.get("type") == "image_url" else 0
        for p in content
    )


def _forget(key: int) -> Callable[[Any], None]:
    """The weakref callback that drops a collected message's entry."""
    def drop(_ref: Any) -> None:
        _TOKENS.pop(key, None)

    return drop


def _message_tokens(message: ChatMessage) -> int:
    """One message's estimate. Tool-call arguments count: they are sent too.

    Remembered per message object, with the very objects it was computed from (compared by
    identity and held, so an identity cannot be reused): history is append-only, so each
    message is estimated once rather than once per turn, and a message whose content is
    replaced (truncation, compaction) is estimated again. The entry goes with the message.
    """
    key = id(message)
    entry = _TOKENS.get(key)
    if entry is not None and entry[0] is message.content and entry[1] is message.tool_calls:
        return entry[2]
    tokens = MESSAGE_OVERHEAD + _content_tokens(message.content)
    for call in message.tool_calls or ():
        tokens += estimate_tokens(call.name + text_json(call.arguments))
    ref = entry[3] if entry is not None else weakref.ref(message, _forget(key))
    _TOKENS[key] = (message.content, message.tool_calls, tokens, ref)
    return tokens


# id(message) → (content, tool_calls, tokens, weakref to the message); see _message_tokens.
_TOKENS: dict[int, tuple[Any, Any, int, weakref.ref[ChatMessage]]] = {}


def _always_kept(message: ChatMessage) -> bool:
    return message.pinned or message.role == "system"


def _drop_orphans(suffix: list[ChatMessage], *, head_has_turns: bool) -> list[ChatMessage]:
    """Trim the kept suffix's start so the history stays valid for a provider.

    A leading ``tool`` message lost its assistant turn (providers reject that); a
    leading assistant turn is context-free when nothing but system messages precedes it.
    """
    start = 0
    while start < len(suffix):
        role = suffix[start].role
        if role == "tool" or (role == "assistant" and not head_has_turns):
            start += 1
            continue
        break
    return suffix[start:]
