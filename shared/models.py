"""Wire-level data model shared by the engine, the LLM client and both shells.

Field names are part of the public contract. Everything here is a
pydantic model that round-trips through JSON, because run state lives in Redis between
Celery steps.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["system", "user", "assistant", "tool"]


class ToolCallRequest(BaseModel):
    """One tool call the LLM asked for. Unparseable arguments arrive as ``{"_raw": "..."}``."""

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ChatMessage(BaseModel):
    """One message of a conversation. ``pinned`` survives compaction and is never sent."""

    model_config = ConfigDict(extra="ignore")

    role: Role
    content: str | list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    tool_calls: list[ToolCallRequest] | None = None
    name: str | None = None
    pinned: bool = False
    reasoning_content: str | None = None

    def text(self) -> str:
        """The content as plain text (text parts of a vision array joined)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return " ".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")


class Usage(BaseModel):
    """Token usage; addable. ``llm_calls`` counts calls that reported usage."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    llm_calls: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cost_usd: float = 0.0
    """Dollars, for the calls whose model has a price (``reactq.shared.llm.pricing``)."""

    def __add__(self, other: Usage) -> Usage:
        out = {k: getattr(self, k) + getattr(other, k) for k in Usage.model_fields}
        out["cost_usd"] = round(self.cost_usd + other.cost_usd, 11)
        return Usage(**out)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Usage:
        """Usage of one LLM call from a provider's usage dict (empty dict ⇒ zero, 0 calls)."""
        if not data:
            return cls()
        prompt = int(data.get("prompt_tokens") or 0)
        completion = int(data.get("completion_tokens") or 0)
        total = int(data.get("total_tokens") or (prompt + completion))
        return cls(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=total,
            llm_calls=1,
            cache_read_input_tokens=int(data.get("cache_read_input_tokens") or 0),
            cache_creation_input_tokens=int(data.get("cache_creation_input_tokens") or 0),
            cost_usd=float(data.get("cost_usd") or 0.0),
        )

    def public(self) -> dict[str, Any]:
        """The ``usage`` object of the ``done`` event: every call the run was billed for."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "llm_calls": self.llm_calls,
            "cached_tokens": self.cache_read_input_tokens,
            "cost_usd": self.cost_usd,
        }


class LLMResult(BaseModel):
    """The reply of one non-streaming ``chat()`` call."""

    message: ChatMessage
    usage: dict[str, Any] = Field(default_factory=dict)


class StreamChunk(BaseModel):
    """One chunk of ``stream_chat()``."""

    delta_content: str | None = None
    delta_reasoning: str | None = None
    finish_reason: str | None = None
    tool_calls: list[ToolCallRequest] | None = None
    usage: dict[str, Any] | None = None


class Artifact(BaseModel):
    name: str
    path: str = ""
    mime_type: str = "text/plain"
    size: int = 0


class ToolResult(BaseModel):
    """A rich tool result. Plain ``str`` results are the common case."""

    content: str
    content_type: Literal["text", "html", "markdown", "json"] = "text"
    artifacts: list[Artifact] = Field(default_factory=list)
