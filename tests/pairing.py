"""What every provider requires of a chat history: an assistant message with ``tool_calls``
is followed by exactly its tool results (one per call id, any order) and nothing else
before them; a tool message answers a call of the assistant message just before it.

``pairing_problem(request_body)`` returns a description of the first violation, or None.
Integration tests run it over every request the scripted LLM server received.
"""

from __future__ import annotations

from typing import Any


def pairing_problem(body: dict[str, Any]) -> str | None:
    messages = body.get("messages") or []
    open_ids: set[str] = set()
    answerable: set[str] = set()  # ids of the assistant turn the current tool block belongs to
    for n, m in enumerate(messages):
        role = m.get("role")
        if role == "tool":
            cid = m.get("tool_call_id")
            if cid not in answerable:
                return f"message {n}: tool result {cid!r} answers no call of the assistant turn before it"
            if cid not in open_ids:
                return f"message {n}: tool call {cid!r} answered twice"
            open_ids.discard(cid)
            continue
        if open_ids:
            return (f"message {n} ({role}) comes before the results of tool calls "
                    f"{sorted(open_ids)}")
        answerable = set()
        calls = m.get("tool_calls") or [] if role == "assistant" else []
        if calls:
            ids = [c.get("id") for c in calls]
            if len(set(ids)) != len(ids) or not all(ids):
                return f"message {n}: tool call ids missing or repeated: {ids}"
            open_ids = set(ids)
            answerable = set(ids)
    if open_ids:
        return f"the request ends before the results of tool calls {sorted(open_ids)}"
    return None
