"""Answer synthesis: the prompt over the trace, the call, and the fallback."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from reactq.shared.engine import prompts as P
from reactq.shared.engine.conversation import enriched_query
from reactq.shared.engine.state import RunState
from reactq.shared.errors import RateLimited
from reactq.shared.llm.base import LLM
from reactq.shared.models import ChatMessage, Usage

log = logging.getLogger(__name__)


def synthesis_messages(state: RunState, *, directive: str | None = None,
                       language_directive: str | None = None,
                       system_prompt: str = P.SYNTHESIS_SYSTEM) -> list[ChatMessage]:
    """The synthesizer's system prompt and ``Question: … Agent execution trace: …``.

    The trace holds every tool call and its result (cut when recorded), in both modes; the
    completion checklist and its verification reply are never part of it.
    ``directive`` defaults to the run's extra instructions, so the synthesizer, which writes
    what the user reads, follows them as the loop did ("always answer in French").
    ``system_prompt``: the synthesizer's instructions (a typed answer has its own).
    """
    if directive is None:
        directive = state.system_prompt
    system = system_prompt
    if directive:
        system += f"\n\n## Agent Directive\n{directive}"
    if language_directive:
        system += f"\n- {language_directive}"
    trace = "\n".join(state.trace) if state.trace else "(no tool calls)"
    if state.answer:
        # The loop's own answer is part of the trace: without tools it is all there is.
        trace += f"\nAssistant answer draft: {state.answer}"
    return [
        ChatMessage(role="system", content=system),
        # On a thread the question comes with the "Previous conversation" block.
        ChatMessage(role="user", content=f"Question: {enriched_query(state.history, state.query)}"
                                         f"\n\nAgent execution trace:\n{trace}"),
    ]


async def synthesize(state: RunState, llm: LLM, on_delta: Callable[[str], Awaitable[None]] | None = None,
                     ) -> tuple[str, BaseException | str | None]:
    """Stream the synthesis from ``llm``, handing each delta to ``on_delta`` as it comes.
    Returns (the text, None), or ("", why it failed): the stream raised, or gave no text.
    Its usage is added to the run's (the synthesis is billed like any call). A wait for
    capacity (``RateLimited``) or a cancellation is not a failed synthesis: it propagates,
    and the shell resumes the step."""
    parts: list[str] = []
    try:
        async for chunk in llm.stream_chat(synthesis_messages(state)):
            if chunk.usage:
                state.usage = state.usage + Usage.from_dict(chunk.usage)
            if chunk.delta_content:
                parts.append(chunk.delta_content)
                if on_delta is not None:
                    await on_delta(chunk.delta_content)
    except (asyncio.CancelledError, RateLimited):
        raise
    except Exception as exc:
        log.warning("answer synthesis failed for run %s: %s", state.run_id, exc)
        return "", exc
    if not parts:
        return "", "the synthesis returned no text"
    return "".join(parts), None


def fallback_chunks(text: str, size: int = 30) -> list[str]:
    """The loop's answer as ~``size``-char chunks split at word boundaries.

    Joining the chunks gives back ``text`` exactly.
    """
    if not text:
        return []
    chunks: list[str] = []
    current = ""
    for word in _words(text):
        if current and len(current) + len(word) > size:
            chunks.append(current)
            current = ""
        current += word
    if current:
        chunks.append(current)
    return chunks


def _words(text: str) -> list[str]:
    """Split keeping each word's trailing whitespace, so the pieces concatenate to ``text``."""
    out: list[str] = []
    buf = ""
    for ch in text:
        if buf and not buf[-1].isspace() and ch.isspace():
            buf += ch
            continue
        if buf and buf[-1].isspace() and not ch.isspace():
            out.append(buf)
            buf = ch
            continue
        buf += ch
    if buf:
        out.append(buf)
    return out
