"""The one small LLM interface the engine talks to.

An ``LLM`` has a ``name``, an ``abilities`` dict and two coroutines: ``chat`` (non-streaming,
used by every loop turn and by ``structured_llm_call``) and ``stream_chat`` (used by answer
synthesis). ``shared/llm/openai.py`` adapts the official ``openai`` client to it;
``shared/llm/testing.py`` provides function and scripted fakes for tests.
"""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from typing import Any, Protocol, TypedDict, Unpack, runtime_checkable
from urllib.parse import urlsplit

from reactq.shared.errors import ConfigError
from reactq.shared.models import ChatMessage, LLMResult, StreamChunk

#: Unit tests set this to False (tests/conftest.py) so that no test can reach a real model.
ALLOW_REAL_LLM = True


class StreamOptions(TypedDict, total=False):
    """What a call may set besides the messages (every key optional; None = not sent)."""

    tools: list[dict[str, Any]] | None
    tool_choice: Any
    temperature: float | None
    max_tokens: int | None


class ChatOptions(StreamOptions, total=False):
    """``stream_chat``'s options plus what only a non-streamed call takes."""

    response_format: dict[str, Any] | None
    reasoning_effort: str | None


@runtime_checkable
class LLM(Protocol):
    """What the engine needs of a model. Missing ability keys mean False."""

    name: str
    abilities: dict[str, bool]
    context_size: int | None

    async def chat(self, messages: list[ChatMessage], **options: Unpack[ChatOptions]) -> LLMResult: ...

    def stream_chat(self, messages: list[ChatMessage],
                    **options: Unpack[StreamOptions]) -> AsyncIterator[StreamChunk]: ...


class DelegatingLLM:
    """What every ``LLM`` that wraps another (tracing, metering, flow control) shares: ``name``,
    ``abilities`` and ``context_size`` are the wrapped model's own (the same objects), and any
    other attribute (``model``, ``base_url``, …) is read through. Subclasses add ``chat`` and
    ``stream_chat``."""

    def __init__(self, inner: LLM) -> None:
        self._inner = inner
        self.name = inner.name
        self.abilities = inner.abilities
        self.context_size = inner.context_size

    def __getattr__(self, item: str) -> Any:
        return getattr(self._inner, item)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._inner!r})"


def ability(llm: LLM, key: str, default: bool = False) -> bool:
    """``llm.abilities[key]`` with a default for a missing key."""
    return bool(llm.abilities.get(key, default))


def max_tool_turns(llm: LLM) -> int | None:
    """The model's ``max_tool_turns`` (registry entry; on ``OpenAILLM``, read through any
    wrapper): after that many turns with tool calls it may only answer. None: no limit."""
    value = getattr(llm, "max_tool_turns", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def answer_synthesis(llm: LLM) -> bool:
    """False when the model's registry entry says ``answer_synthesis = false``: the loop's
    answer is the run's answer, streamed as it is, without a synthesis call."""
    return getattr(llm, "answer_synthesis", True) is not False


def is_loopback_url(base_url: str | None) -> bool:
    """True when ``base_url`` points at this machine (127.0.0.0/8, ::1, localhost)."""
    if not base_url:
        return False  # None = api.openai.com
    host = urlsplit(base_url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_allowed(name: str, base_url: str | None) -> None:
    """``ConfigError`` when real endpoints are off (``ALLOW_REAL_LLM``, read at call time: tests
    flip it after import) and ``base_url`` is not on this machine."""
    if not ALLOW_REAL_LLM and not is_loopback_url(base_url):
        raise ConfigError(
            f"model {name!r}: real LLM endpoints are disabled (ALLOW_REAL_LLM=False) and "
            f"base_url {base_url or 'https://api.openai.com/v1'!r} is not a loopback address")
