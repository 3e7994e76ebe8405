"""Message shapes for chat templates that cannot show tool results.

Some servers' chat templates drop ``tool`` messages: llama-cpp-python's
``chatml-function-calling`` (the bundled SmolLM2's) renders the assistant's tool call but not
the ``tool`` message that answers it, so the model never sees a result and calls the tool
again. A model entry with ``tool_results_as = "user"`` sends each tool result as a ``user``
message instead, naming the tool and the call; the assistant's tool calls are sent as they
are. The engine's own history keeps the ``tool`` messages (the shape is applied on the wire).
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = ["ToolResultsAs", "tool_results_as_user", "TOOL_RESULT_PREFIX"]

ToolResultsAs = Literal["tool", "user"]
TOOL_RESULT_PREFIX = "Result of the tool call {name}:"


def tool_results_as_user(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` (OpenAI wire dicts) with every ``tool`` message turned into a ``user`` one."""
    names = {tc["id"]: tc["function"]["name"]
             for m in messages if m.get("role") == "assistant"
             for tc in m.get("tool_calls") or ()}
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.get("role") != "tool":
            out.append(m)
            continue
        name = names.get(m.get("tool_call_id", ""), "tool")
        content = m.get("content") or ""
        text = content if isinstance(content, str) else " ".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict))
        out.append({"role": "user", "content": f"{TOOL_RESULT_PREFIX.format(name=name)}\n{text}"})
    return out
