"""Between reactq's messages and the OpenAI chat wire format, both ways.

Request building: ``to_openai_message`` (a ``ChatMessage`` as the dict the API takes).
Reply reading: ``reply_message`` (a completion's message as a ``ChatMessage``), tool-call
arguments (``parse_arguments``), the provider's reasoning field and the usage dict.
"""

from __future__ import annotations

import json
from typing import Any

from reactq.shared.models import ChatMessage, ToolCallRequest


def parse_arguments(raw: str | None) -> dict[str, Any]:
    """Tool-call arguments from their JSON text: ``""``/None ⇒ ``{}``; anything that is not a
    JSON object ⇒ ``{"_raw": raw}`` (so the engine can report it back to the model)."""
    if raw is None or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}


def _arguments_json(arguments: dict[str, Any]) -> str:
    # Arguments that failed to parse go back verbatim: the model should see what it sent.
    if set(arguments) == {"_raw"} and isinstance(arguments["_raw"], str):
        return arguments["_raw"]
    return json.dumps(arguments, ensure_ascii=False)


def to_openai_message(message: ChatMessage) -> dict[str, Any]:
    """One ``ChatMessage`` as an OpenAI chat message dict.

    ``pinned`` is never sent; None fields are dropped; vision content arrays pass through;
    assistant ``reasoning_content`` is sent back (providers such as DeepSeek require it on
    tool-call turns; others ignore the extra field)."""
    out: dict[str, Any] = {"role": message.role}
    # Always send content: llama.cpp's function-calling template fails (HTTP 500) on an
    # assistant tool-call turn without it, and "" is what every server accepts.
    out["content"] = message.content if message.content is not None else ""
    if message.role == "tool":
        if message.tool_call_id is not None:
            out["tool_call_id"] = message.tool_call_id
        # `name` is not part of OpenAI's tool-message schema; strict servers reject it.
    elif message.name is not None:
        out["name"] = message.name
    if message.role == "assistant":
        if message.tool_calls:
            out["tool_calls"] = [
                {"id": tc.id, "type": "function",
                 "function": {"name": tc.name, "arguments": _arguments_json(tc.arguments)}}
                for tc in message.tool_calls
            ]
        if message.reasoning_content is not None:
            out["reasoning_content"] = message.reasoning_content
    return out


def _field(obj: Any, key: str) -> Any:
    """``obj.key``, or ``obj[key]`` of a reply read as plain JSON (``OpenAILLM.chat``)."""
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def _extra(obj: Any, key: str) -> Any:
    """A field the openai types do not declare (e.g. ``reasoning_content``)."""
    if isinstance(obj, dict):
        return obj.get(key)
    extra = getattr(obj, "model_extra", None) or {}
    if key in extra:
        return extra[key]
    return getattr(obj, key, None)


def reasoning_of(obj: Any) -> str | None:
    # DeepSeek / llama.cpp / older vLLM say `reasoning_content`; OpenRouter and newer vLLM `reasoning`.
    for key in ("reasoning_content", "reasoning"):
        value = _extra(obj, key)
        if isinstance(value, str):
            return value
    return None


def usage_dict(usage: Any) -> dict[str, Any]:
    if usage is None:
        return {}
    out: dict[str, Any] = {
        "prompt_tokens": int(_field(usage, "prompt_tokens") or 0),
        "completion_tokens": int(_field(usage, "completion_tokens") or 0),
        "total_tokens": int(_field(usage, "total_tokens") or 0),
    }
    details = _field(usage, "prompt_tokens_details")
    cached = _field(details, "cached_tokens") if details is not None else None
    if cached is not None:
        out["cache_read_input_tokens"] = int(cached)
    return out


def reply_message(msg: Any) -> ChatMessage:
    """A completion's ``choices[0].message`` (the SDK's type, or the reply's JSON object) as an
    assistant ``ChatMessage``."""
    calls: list[ToolCallRequest] = []
    for n, tc in enumerate(_field(msg, "tool_calls") or []):
        fn = _field(tc, "function")
        if fn is None:  # a non-function ("custom") tool call: nothing the engine can run
            continue
        calls.append(ToolCallRequest(id=_field(tc, "id") or f"call_{n}", name=_field(fn, "name"),
                                     arguments=parse_arguments(_field(fn, "arguments"))))
    return ChatMessage(role="assistant", content=_field(msg, "content"), tool_calls=calls or None,
                       reasoning_content=reasoning_of(msg))
