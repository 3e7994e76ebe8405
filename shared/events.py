"""The run event protocol.

An event is a channel name plus a JSON payload that always carries an integer ``seq``
(1, 2, 3 … per run). The same value is the Redis stream entry (``event`` = channel,
``data`` = JSON) and the SSE frame (``event:`` = channel). Payload fields listed in
``CHANNEL_DOCS`` may be extended, never renamed; the events reference of the docs is
generated from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, Protocol

Channel = Literal["step", "answer", "compact", "phase", "inject", "error", "done", "guardrail", "approval",
                  "fork"]
CHANNELS: tuple[str, ...] = ("step", "answer", "compact", "phase", "inject", "error", "done", "guardrail",
                             "approval", "fork")
TERMINAL_CHANNEL = "done"


@dataclass(frozen=True)
class ChannelDoc:
    """What one channel's events say: a sentence, and each payload field's meaning."""

    summary: str
    fields: dict[str, str]


#: Every channel of a run's stream, documented (a test keeps it in step with ``CHANNELS``).
CHANNEL_DOCS: dict[str, ChannelDoc] = {
    "step": ChannelDoc("The loop's progress: a turn of thinking, a tool call, the start of the answer.", {
        "type": "`thinking` (an LLM turn), `iteration` (one tool call) or `answer` (synthesis begins)",
        "status": "`start` or `done`",
        "iteration": "the LLM turn this belongs to (1, 2, …)",
        "reasoning": "`thinking done`: the model's reasoning for this turn; `iteration start`: the same, on the turn's first call",
        "tool_name, tool_args, tool_call_id": "`iteration`: which tool is called with what, and the call's id",
        "observation, error, content_type": "`iteration done`: what the tool returned (cut to `REACTQ_TOOL_OBS_TRUNCATION`), or its error",
        "iter_elapsed": "`iteration done`: seconds the call took",
        "reused": "`iteration done`: `true` when the call was answered from a recorded ledger "
                  "(a fork's parent run) without executing the tool",
    }),
    "answer": ChannelDoc("The final answer, streamed.", {
        "status": "`start`, then `delta` events, then `done`",
        "content": "`delta`: the next piece of the answer's text",
    }),
    "compact": ChannelDoc("The conversation was compacted to fit the model's context.", {
        "original_messages": "messages before compaction",
        "kept_messages": "messages after it",
    }),
    "phase": ChannelDoc("A phase the run entered that is not an LLM turn.", {
        "phase": "`selecting_tools` (picking tools from a large catalog) or `rate_limited` (waiting for capacity)",
        "total_tools": "`selecting_tools`: the tools to choose from",
        "model, wait_s": "`rate_limited`: the model whose limit was reached, and the expected wait",
    }),
    "inject": ChannelDoc("A follow-up message (an interrupt) was taken into the conversation.", {
        "type": "`inject`",
        "content": "the message",
        "id": "the interrupt's id",
    }),
    "error": ChannelDoc("Something went wrong; the run may still end with an answer.", {
        "kind": "`budget`, `synthesis_fallback`, `tool_uncertain`, `tool_crashed`, `tool_unavailable`, `task_crashed`, "
                "`cancelled`, `interrupted`, `internal`, …",
        "message": "what happened, for a person",
    }),
    "done": ChannelDoc("The run ended: always the last event.", {
        "status": "`succeeded`, `failed` or `cancelled`",
        "answer": "the final answer's text",
        "iterations": "LLM turns taken",
        "usage": "tokens used (`prompt_tokens`, `completion_tokens`, `total_tokens`)",
        "elapsed": "seconds from start to end",
        "run_id": "the run's id",
        "pending_injections": "follow-ups that arrived too late to be read (only when there are some)",
    }),
    "guardrail": ChannelDoc("A guardrail hook decided on the run's query (before the first LLM call) or on its answer (before any of it is published).", {
        "point": "`run_start` or `answer`",
        "guardrail": "the hook's name",
        "decision": "`allowed`, `rewritten` (the answer was changed, e.g. redacted) or `blocked` (the run ends `failed`)",
        "message": "why, when the hook gave a reason",
    }),
    "approval": ChannelDoc("A tool call waits for a person's decision, or was decided.", {
        "status": "`requested`, then `approved`, `edited`, `rejected`, `responded` or `expired`",
        "approval_id, tool_call_id": "the approval and the call it holds back",
        "tool_name, tool_args, args_digest": "`requested`: the call as the model wrote it, and the hex SHA-256 "
                                             "of its arguments as canonical JSON (a decision names it)",
        "reason, expires_at": "`requested`: why it waits, and when `on_timeout` applies",
        "decided_by, approved_args": "a decision: who decided (`timeout` for an expiry), an edit's arguments",
    }),
    "fork": ChannelDoc("The run is a fork of an earlier run: its first event (the parent's events are not copied).", {
        "forked_from": "`{run_id, turn}`: the parent run, and the turn whose LLM call the fork starts with",
        "reuse": "`effects`, `all` or `none`: which of the parent's recorded calls the fork reuses if made again",
    }),
}


@dataclass(frozen=True)
class Event:
    """One event; ``data["seq"]`` is its position in the run's stream."""

    channel: str
    data: dict[str, Any]

    @property
    def seq(self) -> int:
        return int(self.data["seq"])

    def to_fields(self) -> dict[str, str]:
        """The Redis stream entry."""
        return {"event": self.channel, "data": dumps(self.data)}

    @classmethod
    def from_fields(cls, fields: dict[Any, Any]) -> Event:
        def s(v: Any) -> str:
            return v.decode() if isinstance(v, bytes) else str(v)

        f = {s(k): s(v) for k, v in fields.items()}
        return cls(f["event"], json.loads(f["data"]))

    def sse(self, event_id: str | None = None) -> str:
        """One SSE frame (non-ASCII kept)."""
        head = f"id: {event_id}\n" if event_id else ""
        return f"{head}event: {self.channel}\ndata: {dumps(self.data)}\n\n"


def dumps(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


class EventSink(Protocol):
    """Where a shell sends events. ``emit`` must keep order."""

    async def emit(self, events: list[Event]) -> None: ...


class ListSink:
    """Collects events in memory (tests, the in-process runner's default)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def emit(self, events: list[Event]) -> None:
        self.events.extend(events)

    def channels(self) -> list[str]:
        return [e.channel for e in self.events]

    def compact(self) -> list[tuple[str, str | None, str | None]]:
        """(channel, type, status) triples: handy for asserting sequences."""
        return [(e.channel, e.data.get("type"), e.data.get("status")) for e in self.events]
