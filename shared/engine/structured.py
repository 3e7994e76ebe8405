"""``structured_llm_call``: the single entry point for JSON-schema output.

Three levels are tried in order, each only if the model can do it:

* ``native_fc``: a forced function call whose arguments are the data (no retry) — or, with
  ``prefer_json_schema`` and a model whose registry entry has the ``json_schema`` ability,
  ``json_schema``: ``response_format={"type": "json_schema", ...}`` with the schema (a
  constrained server: llama.cpp's grammar, vLLM's guided decoding), one reformat retry;
* ``json_mode``: ``response_format={"type": "json_object"}``, one reformat retry;
* ``plain_text``: free text through ``extract_json`` then ``regex_fallback``, one retry.

A failed attempt is: the LLM raised, no JSON object was found, or ``parse_fn`` returned
``None`` or raised. Only ``StructuredOutputError``, cancellation, ``CostCapReached`` (a dollar
cap refused the attempt: no other level is tried) and the exception types the caller names in
``passthrough`` (e.g. ``RateLimited``: the step waits, it did not fail) ever escape.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from reactq.shared.engine import billing
from reactq.shared.errors import CostCapReached, StructuredOutputError
from reactq.shared.llm.base import LLM, ability
from reactq.shared.models import ChatMessage, LLMResult, Usage

from .jsonx import extract_json

__all__ = [
    "REFORMAT_PROMPT",
    "StructuredCallResult",
    "structured_llm_call",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")
Level = Literal["native_fc", "json_schema", "json_mode", "plain_text"]

REFORMAT_PROMPT = (
    "Your previous response could not be parsed as valid JSON. Please respond with ONLY "
    "a JSON object matching the requested schema — no markdown, no explanation, no code "
    "fences."
)
_FC_DESCRIPTION = "Return structured data matching the schema."
_ERROR_SNIPPET = 200


class _Unset:
    """Sentinel type: ``default_value`` was not passed (``None`` is a valid default)."""

    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Any = _Unset()


@dataclass
class StructuredCallResult(Generic[T]):
    """The outcome of one ``structured_llm_call``."""

    value: T
    """``parse_fn(raw_data)``, the dict itself without ``parse_fn``, or the default."""
    raw_data: dict[str, Any]
    """The extracted dict; ``{}`` when the default was returned."""
    level_used: Level
    """The level that succeeded (``plain_text`` when the default was returned)."""
    llm_calls: int
    """Every LLM call made, retries and failed calls included."""
    total_usage: Usage = field(default_factory=Usage)
    """Usage summed over every call."""


@dataclass
class _Attempt:
    """What one LLM call produced: its text (``""`` on error) and the parsed value."""

    content: str = ""
    data: dict[str, Any] | None = None
    value: Any = None
    ok: bool = False


@dataclass
class _Session:
    """Per-call bookkeeping shared by all levels."""

    llm: LLM
    messages: list[ChatMessage]
    schema: dict[str, Any]
    function_name: str
    parse_fn: Callable[[dict[str, Any]], Any] | None
    regex_fallback: Callable[[str], dict[str, Any] | None] | None
    temperature: float | None
    max_tokens: int | None
    passthrough: tuple[type[BaseException], ...] = ()
    calls: int = 0
    usage: Usage = field(default_factory=Usage)
    last_content: str = ""

    async def chat(self, messages: list[ChatMessage], **kwargs: Any) -> LLMResult | None:
        """One counted LLM call; an exception is logged and reported as ``None``."""
        self.calls += 1
        try:
            result = await self.llm.chat(
                messages, temperature=self.temperature, max_tokens=self.max_tokens, **kwargs
            )
        except CostCapReached:
            raise  # a dollar cap refused the attempt: no other level is tried
        except self.passthrough:
            raise
        except Exception as exc:  # noqa: BLE001 — any LLM failure is a failed attempt.
            logger.warning("structured_llm_call(%s): LLM call failed: %s",
                           self.function_name, exc)
            return None
        self.usage = self.usage + Usage.from_dict(result.usage)
        billing.charge(result.usage)
        return result

    def finish(self, attempt: _Attempt) -> _Attempt:
        """Run ``parse_fn`` on the extracted data and remember the content for errors."""
        if attempt.content:
            self.last_content = attempt.content
        if attempt.data is None:
            return attempt
        attempt.value, attempt.ok = _apply_parse(self.parse_fn, attempt.data)
        return attempt


async def structured_llm_call(
    llm: LLM,
    messages: list[ChatMessage],
    schema: dict[str, Any],
    function_name: str,
    *,
    parse_fn: Callable[[dict[str, Any]], Any] | None = None,
    regex_fallback: Callable[[str], dict[str, Any] | None] | None = None,
    default_value: Any = _UNSET,
    temperature: float | None = None,
    max_tokens: int | None = None,
    prefer_json_schema: bool = False,
    allow_native: bool = True,
    passthrough: tuple[type[BaseException], ...] = (),
) -> StructuredCallResult[Any]:
    """Get a JSON object matching ``schema`` from ``llm``, degrading level by level.

    Raises ``StructuredOutputError`` when every level failed and no ``default_value``
    was given.
    """
    session = _Session(llm, list(messages), schema, function_name, parse_fn,
                       regex_fallback, temperature, max_tokens, passthrough)
    for level in _levels(llm, prefer_json_schema, allow_native):
        attempt = await _run_level(session, level)
        if attempt.ok:
            assert attempt.data is not None
            return StructuredCallResult(attempt.value, attempt.data, level,
                                        session.calls, session.usage)
    if default_value is not _UNSET:
        return StructuredCallResult(default_value, {}, "plain_text", session.calls,
                                    session.usage)
    raise StructuredOutputError(_failure_message(session.last_content))


def _levels(llm: LLM, prefer_json_schema: bool = False, allow_native: bool = True) -> list[Level]:
    """The levels this model supports, in degradation order (``allow_native=False``:
    no function call, e.g. for a run the caller put in JSON mode)."""
    levels: list[Level] = []
    if prefer_json_schema and ability(llm, "json_schema"):
        levels.append("json_schema")
    elif allow_native and ability(llm, "tool_call") and ability(llm, "tool_choice", default=True):
        levels.append("native_fc")
    if ability(llm, "json_mode"):
        levels.append("json_mode")
    levels.append("plain_text")
    return levels


async def _run_level(session: _Session, level: Level) -> _Attempt:
    """One level: a first attempt, plus for text levels one reformat retry."""
    if level == "native_fc":
        return await _native_attempt(session)
    first = await _text_attempt(session, level, session.messages)
    # An empty reply (or an LLM error) gives the model nothing to reformat: no retry.
    if first.ok or not first.content:
        return first
    retry_messages = [
        *session.messages,
        ChatMessage(role="assistant", content=first.content),
        ChatMessage(role="user", content=REFORMAT_PROMPT),
    ]
    return await _text_attempt(session, level, retry_messages)


async def _native_attempt(session: _Session) -> _Attempt:
    """A forced call of the one function whose parameters are the schema."""
    tool = {"type": "function", "function": {
        "name": session.function_name,
        "description": _FC_DESCRIPTION,
        "parameters": session.schema,
    }}
    choice = {"type": "function", "function": {"name": session.function_name}}
    result = await session.chat(session.messages, tools=[tool], tool_choice=choice,
                                reasoning_effort=None)
    if result is None:
        return _Attempt()
    message = result.message
    content = message.text()
    if message.tool_calls:
        args = message.tool_calls[0].arguments
        data = _arguments_data(args)
        # Keep the arguments as "content" so a final error message shows what came back.
        return session.finish(_Attempt(content or json.dumps(args, ensure_ascii=False), data))
    return session.finish(_Attempt(content, extract_json(content)))


async def _text_attempt(session: _Session, level: Level,
                        messages: list[ChatMessage]) -> _Attempt:
    """A ``json_mode`` or ``plain_text`` call and its extraction."""
    kwargs: dict[str, Any] = {}
    if level == "json_mode":
        kwargs["response_format"] = {"type": "json_object"}
    elif level == "json_schema":
        kwargs["response_format"] = {"type": "json_schema", "json_schema": {
            "name": session.function_name, "schema": session.schema}}
    result = await session.chat(messages, **kwargs)
    if result is None:
        return _Attempt()
    content = result.message.text()
    data = extract_json(content)
    if data is None and level == "plain_text":
        data = _regex_data(session.regex_fallback, content)
    return session.finish(_Attempt(content, data))


def _arguments_data(args: Any) -> dict[str, Any] | None:
    """Tool-call arguments as data; unparseable streamed arguments get a second chance."""
    if not isinstance(args, dict):
        return extract_json(args) if isinstance(args, str) else None
    raw = args.get("_raw")
    if len(args) == 1 and isinstance(raw, str):
        return extract_json(raw)
    return args


def _regex_data(regex_fallback: Callable[[str], dict[str, Any] | None] | None,
                content: str) -> dict[str, Any] | None:
    """The caller's last-resort extractor; its failures are just failed attempts."""
    if regex_fallback is None or not content:
        return None
    try:
        data = regex_fallback(content)
    except Exception:  # noqa: BLE001 — a buggy fallback must not break degradation.
        logger.debug("regex_fallback raised", exc_info=True)
        return None
    return data if isinstance(data, dict) else None


def _apply_parse(parse_fn: Callable[[dict[str, Any]], Any] | None,
                 data: dict[str, Any]) -> tuple[Any, bool]:
    """``(value, ok)``; ``None`` or any exception from ``parse_fn`` is a failure."""
    if parse_fn is None:
        return data, True
    try:
        value = parse_fn(data)
    except Exception as exc:  # noqa: BLE001 — any parse error degrades.
        logger.debug("parse_fn rejected structured data: %s", exc)
        return None, False
    return value, value is not None


def _failure_message(last_content: str) -> str:
    """The error names the last non-empty content, cut to 200 chars."""
    snippet = last_content[:_ERROR_SNIPPET]
    if len(last_content) > _ERROR_SNIPPET:
        snippet += "..."
    return f"All structured extraction levels failed. Last content: {snippet}"
