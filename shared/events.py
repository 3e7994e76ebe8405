"""The run event protocol (DESIGN.md "Events"; seed "SSE Event Protocol").

An event is a channel name plus a JSON payload that always carries an integer ``seq``
(1, 2, 3 … per run). The same value is the Redis stream entry (``event`` = channel,
``data`` = JSON) and the SSE frame (``event:`` = channel). Payload fields listed in
DESIGN.md may be extended, never renamed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, Protocol

Channel = Literal["step", "answer", "compact", "phase", "inject", "error", "done", "guardrail"]
CHANNELS: tuple[str, ...] = ("step", "answer", "compact", "phase", "inject", "error", "done", "guardrail")
TERMINAL_CHANNEL = "done"


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
