"""What the sync and the async client share, with no I/O: a call's description, the retry
rule, the backoff, and the server-sent-events decoder.

A call is retried after a transport error (connection refused, reset, a timeout) or a 502 /
503 / 504 only when repeating it cannot do anything twice: reads, cancels, deletes, and
creates that carry an idempotency key (the client makes one when the caller gave none, so
a retried ``runs.create`` finds the run its first attempt made). A refused connection is
retried for every call: nothing was sent.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from reactq.dispatcher.api_client.models import StreamEvent

T = TypeVar("T")

#: Statuses retried where retrying is safe: the gateway (or what is behind it) is restarting.
RETRY_STATUSES = frozenset({502, 503, 504})


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer."""

    method: str
    path: str
    parse: Callable[[Any], T]
    json: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    #: Safe to send again after a transport error or a 502/503/504.
    retry: bool = False

    def query(self) -> dict[str, Any]:
        return {k: v for k, v in self.params.items() if v is not None}


def with_idempotency_key(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with an ``idempotency_key`` (a fresh one unless the caller gave one)."""
    if fields.get("idempotency_key"):
        return fields
    return {**fields, "idempotency_key": f"client-{uuid.uuid4().hex}"}


def backoff(attempt: int, *, base: float = 0.25, cap: float = 4.0, retry_after: float | None = None) -> float:
    """Seconds before retry ``attempt`` (1, 2, …): exponential with jitter, at least the
    server's ``Retry-After`` when it gave one."""
    wait = min(cap, base * 2.0 ** (attempt - 1)) * (0.5 + random.random() / 2)
    return max(wait, retry_after or 0.0)


class SSEDecoder:
    """Lines of a ``text/event-stream`` → ``StreamEvent``s (comments and keep-alives skipped).
    ``retry_ms`` is the server's last ``retry:`` hint."""

    def __init__(self) -> None:
        self.retry_ms: int | None = None
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, line: str) -> StreamEvent | None:
        """One line (without its end); an event when ``line`` ends one."""
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\x00" not in value:
            self._id = value
        elif name == "retry" and value.isdigit():
            self.retry_ms = int(value)
        return None

    def _dispatch(self) -> StreamEvent | None:
        if not self._data:
            self._event = ""
            return None
        raw = "\n".join(self._data)
        try:
            data = json.loads(raw)
        except ValueError:
            data = {"text": raw}
        event = StreamEvent(event=self._event or "message", data=data if isinstance(data, dict) else {"value": data},
                            id=self._id)
        self._event, self._data = "", []
        return event

    def events(self, lines: Iterable[str]) -> Iterator[StreamEvent]:
        for line in lines:
            ev = self.feed(line)
            if ev is not None:
                yield ev





class Resume:
    """The state of a followed event stream: the last id seen, and how long to keep
    reconnecting. The window restarts whenever an event arrives."""

    def __init__(self, last_event_id: str | None, window_s: float) -> None:
        self.last_id = last_event_id
        self.window_s = window_s
        self.attempt = 0
        self.failing_since: float | None = None

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream"}
        if self.last_id is not None:
            headers["Last-Event-ID"] = self.last_id
        return headers

    def got(self, event: StreamEvent) -> None:
        self.last_id = event.id or self.last_id
        self.attempt = 0
        self.failing_since = None

    def wait_before_retry(self, now: float, retry_ms: int | None, error: Exception) -> float:
        """Seconds to wait before reconnecting; re-raises ``error`` once the window is spent."""
        if self.failing_since is None:
            self.failing_since = now
        self.attempt += 1
        if now - self.failing_since > self.window_s:
            raise error
        hint = None if retry_ms is None else retry_ms / 1000
        return backoff(self.attempt, base=0.2, cap=2.0, retry_after=hint)


__all__ = ["Call", "RETRY_STATUSES", "Resume", "SSEDecoder", "backoff", "with_idempotency_key"]
