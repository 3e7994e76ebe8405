"""The context guard never leaves a tool result without its assistant call (issue 17 item 3:
histories every provider accepts, whatever compaction kept)."""

from __future__ import annotations

import asyncio

from reactq.shared.engine.context import ContextGuard
from reactq.shared.llm.testing import ScriptedLLM, text
from reactq.shared.models import ChatMessage, ToolCallRequest
from tests.pairing import pairing_problem


def _wire(messages: list[ChatMessage]) -> dict:
    return {"messages": [{"role": m.role, "tool_call_id": m.tool_call_id,
                          "tool_calls": [{"id": c.id} for c in m.tool_calls] if m.tool_calls else None}
                         for m in messages]}


def test_llm_compaction_keeps_whole_tool_turns():
    messages = [ChatMessage(role="system", content="s"), ChatMessage(role="user", content="q", pinned=True)]
    for i in range(6):
        call = ToolCallRequest(id=f"c{i}", name="f", arguments={})
        messages += [ChatMessage(role="assistant", content="x" * 2000, tool_calls=[call]),
                     ChatMessage(role="tool", tool_call_id=f"c{i}", name="f", content="y" * 3000)]
    messages.append(ChatMessage(role="assistant", content="done"))
    # The last four compactable messages begin with c4's result: its call must come along.
    guard = ContextGuard(budget=4000, llm=ScriptedLLM([text("summary")]))
    kept = asyncio.run(guard.check_and_compact(messages))
    assert any(m.content and str(m.content).startswith("[Conversation summary]") for m in kept)
    assert pairing_problem(_wire(kept)) is None
    assert [m.tool_call_id for m in kept if m.role == "tool"] == ["c4", "c5"]
