"""The one small LLM interface the engine talks to.

An ``LLM`` has a ``name``, an ``abilities`` dict and two coroutines: ``chat`` (non-streaming,
used by every loop turn and by ``structured_llm_call``) and ``stream_chat`` (used by answer
synthesis). ``shared/llm/openai.py`` adapts the official ``openai`` client to it;
``shared/llm/testing.py`` provides function and scripted fakes for tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

from reactq.shared.models import ChatMessage, LLMResult, StreamChunk

#: Unit tests set this to False (tests/conftest.py) so that no test can reach a real model.
ALLOW_REAL_LLM = True


@runtime_checkable
class LLM(Protocol):
    """What the engine needs of a model. Missing ability keys mean False."""

    name: str
    abilities: dict[str, bool]
    context_size: int | None

    async def chat(
        self,
        messages: list[ChatMessage],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
        response_format: dict[str, Any] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        reasoning_effort: str | None = None,
    ) -> LLMResult: ...

    def stream_chat(
        self,
        messages: list[ChatMessage],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> AsyncIterator[StreamChunk]: ...


def ability(llm: LLM, key: str, default: bool = False) -> bool:
    """``llm.abilities[key]`` with a default for a missing key (SPEC §0.1)."""
    return bool(llm.abilities.get(key, default))
