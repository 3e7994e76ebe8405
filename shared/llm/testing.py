"""In-process LLM fakes for tests: ``FunctionLLM`` and ``ScriptedLLM``, plus reply builders.

``ScriptedLLM`` returns pre-set replies in order; ``chat()`` and ``stream_chat()`` share one
counter. A test that forgets to script a reply fails loudly with
``UnexpectedModelCall`` unless ``repeat_last=True`` (the upstream fixture's behaviour,
used for max-iteration scenarios). Every call is recorded in ``calls``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from reactq.shared.llm.pricing import Price, priced
from reactq.shared.models import ChatMessage, LLMResult, StreamChunk, ToolCallRequest


class UnexpectedModelCall(AssertionError):
    """The scripted LLM was called more times than it has replies."""


class RaiseReply(Exception):
    """Script this exception instance as a reply to make that call raise it."""


@dataclass
class Call:
    """One recorded call: the messages (deep-copied) and keyword arguments."""

    messages: list[ChatMessage]
    kwargs: dict[str, Any]
    stream: bool


Reply = LLMResult | BaseException | str


def text(content: str, *, usage: dict[str, Any] | None = None,
         reasoning_content: str | None = None) -> LLMResult:
    """A plain assistant reply."""
    return LLMResult(
        message=ChatMessage(role="assistant", content=content, reasoning_content=reasoning_content),
        usage=usage or {},
    )


def final(answer: str, reasoning: str = "", **kw: Any) -> LLMResult:
    """A JSON-mode final-answer reply."""
    return text(json.dumps({"type": "final_answer", "reasoning": reasoning, "answer": answer}), **kw)


def tool_json(name: str, args: dict[str, Any] | None = None, reasoning: str = "", **kw: Any) -> LLMResult:
    """A JSON-mode tool-call reply."""
    return text(json.dumps({"type": "tool_call", "reasoning": reasoning, "tool_name": name,
                            "tool_args": args or {}}), **kw)


def tool_calls(*calls: tuple[str, str, dict[str, Any]], content: str | None = None,
               usage: dict[str, Any] | None = None, reasoning_content: str | None = None) -> LLMResult:
    """A native reply with ``tool_calls``; each call is ``(id, name, args)``."""
    return LLMResult(
        message=ChatMessage(
            role="assistant",
            content=content,
            tool_calls=[ToolCallRequest(id=i, name=n, arguments=a) for i, n, a in calls],
            reasoning_content=reasoning_content,
        ),
        usage=usage or {},
    )


@dataclass
class FunctionLLM:
    """An LLM whose replies come from ``fn(messages, kwargs) -> LLMResult | str``."""

    fn: Callable[[list[ChatMessage], dict[str, Any]], Reply]
    name: str = "function-llm"
    abilities: dict[str, bool] = field(default_factory=dict)
    context_size: int | None = None
    calls: list[Call] = field(default_factory=list)
    price: Price | None = None
    """Like a registry entry's ``price``: each reply's usage then carries ``cost_usd``."""

    def _reply(self, messages: list[ChatMessage], kwargs: dict[str, Any], stream: bool) -> LLMResult:
        # A shallow copy: the engine appends messages but never changes one once sent.
        self.calls.append(Call(list(messages), dict(kwargs), stream))
        reply = self.fn(messages, kwargs)
        if isinstance(reply, BaseException):
            raise reply
        result = text(reply) if isinstance(reply, str) else reply
        if self.price is not None and result.usage:
            result = result.model_copy(update={"usage": priced(result.usage, self.price)})
        return result

    async def chat(self, messages: list[ChatMessage], **kwargs: Any) -> LLMResult:
        return self._reply(messages, kwargs, stream=False)

    async def stream_chat(self, messages: list[ChatMessage], **kwargs: Any) -> AsyncIterator[StreamChunk]:
        result = self._reply(messages, kwargs, stream=True)
        content = result.message.text()
        # Word-sized chunks, so tests see several deltas.
        for i, word in enumerate(content.split(" ")):
            yield StreamChunk(delta_content=word if i == 0 else " " + word)
        yield StreamChunk(finish_reason="stop", usage=result.usage or None)


class ScriptedLLM(FunctionLLM):
    """Replies from a list, in order, shared by ``chat`` and ``stream_chat``."""

    def __init__(self, replies: list[Reply], *, abilities: dict[str, bool] | None = None,
                 name: str = "scripted-llm", repeat_last: bool = False,
                 context_size: int | None = None, price: Price | None = None) -> None:
        self.replies = list(replies)
        self.repeat_last = repeat_last
        super().__init__(fn=self._next, name=name, abilities=dict(abilities or {}),
                         context_size=context_size, price=price)

    def _next(self, messages: list[ChatMessage], kwargs: dict[str, Any]) -> Reply:
        i = len(self.calls) - 1
        if i >= len(self.replies):
            if self.repeat_last and self.replies:
                return self.replies[-1]
            raise UnexpectedModelCall(
                f"ScriptedLLM got call #{i + 1} but only {len(self.replies)} replies are scripted"
            )
        return self.replies[i]

    def assert_complete(self) -> None:
        """Fail when scripted replies were left unused."""
        if len(self.calls) < len(self.replies):
            raise AssertionError(f"{len(self.replies) - len(self.calls)} scripted replies unused")
