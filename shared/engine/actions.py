"""JSON-mode action parsing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from reactq.shared.engine.jsonx import extract_json
from reactq.shared.engine.prompts import PARSE_FAILURE_SENTINEL


@dataclass
class Action:
    """What the LLM decided in one JSON-mode turn."""

    type: Literal["tool_call", "final_answer"]
    reasoning: str = ""
    tool_name: str | None = None
    tool_args: dict[str, Any] = field(default_factory=dict)
    answer: str | None = None

    @property
    def parse_failed(self) -> bool:
        return self.type == "final_answer" and self.reasoning == PARSE_FAILURE_SENTINEL


def parse_action(content: str, reasoning_content: str | None = None) -> Action:
    """Parse a JSON-mode reply. Non-JSON ⇒ a final answer carrying the sentinel reasoning."""
    data = extract_json(content or "")
    if data is None:
        return Action(type="final_answer", reasoning=PARSE_FAILURE_SENTINEL, answer=content or "")
    reasoning = str(data.get("reasoning") or "") or (reasoning_content or "")
    if data.get("type") == "tool_call":
        args = data.get("tool_args")
        return Action(
            type="tool_call",
            reasoning=reasoning,
            tool_name=str(data.get("tool_name") or ""),
            tool_args=args if isinstance(args, dict) else {},
        )
    answer = data.get("answer")
    return Action(
        type="final_answer",
        reasoning=reasoning,
        answer=content if answer is None else (answer if isinstance(answer, str) else str(answer)),
    )
