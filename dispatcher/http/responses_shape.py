"""A run as an OpenAI Responses object, and its event stream as Responses stream events.

Pure functions of the run's stored request, status, result and event stream (no I/O), so that
every gateway replica answers the same and a stream resumed after sequence number N sends
exactly the events after N.

**Sequence numbers** come from the run's own events: the stream event made from run event
``seq`` number ``k`` (0-based) of those it makes has ``sequence_number = 8 * seq + k``
(``response.created`` and ``response.in_progress`` are 0 and 1). They increase along the
stream but are not consecutive; one run event makes at most four stream events.

Output items: each tool call the run made is an ``mcp_call`` item (``id`` = the call's id,
``server_label`` ``reactq``), each approval a person was asked for an ``mcp_approval_request``
item (``id`` = the approval id), and the answer one ``message`` item.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from reactq.shared.events import Event

__all__ = ["RESPONSE_PREFIX", "STATUS", "ItemBook", "response_id", "response_object", "run_id_of"]

RESPONSE_PREFIX = "resp_"
SERVER_LABEL = "reactq"
#: Stream events one run event may make, at most (the numbering's stride).
STRIDE = 8

#: A run's status → the Responses status. ``waiting`` (a person decides an approval) is
#: ``incomplete``: the output holds the ``mcp_approval_request`` to answer.
STATUS = {"queued": "queued", "running": "in_progress", "waiting": "incomplete", "succeeded": "completed",
          "failed": "failed", "cancelled": "cancelled"}


def response_id(run_id: str) -> str:
    return RESPONSE_PREFIX + run_id


def run_id_of(resp_id: str) -> str | None:
    """The run id a response id names (None: not a response id)."""
    return resp_id[len(RESPONSE_PREFIX):] if resp_id.startswith(RESPONSE_PREFIX) and len(resp_id) > 5 else None


def _arguments(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args if args is not None else {}, separators=(",", ":"))


@dataclass
class ItemBook:
    """The output items of a run, built event by event; ``feed`` returns the stream events one
    run event makes (``(type, payload)`` pairs, numbered by the caller)."""

    run_id: str
    items: list[dict[str, Any]] = field(default_factory=list)
    by_id: dict[str, int] = field(default_factory=dict)
    text: str = ""

    @property
    def message_id(self) -> str:
        return f"msg_{self.run_id}"

    def _add(self, item: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.by_id[item["id"]] = len(self.items)
        self.items.append(item)
        return "response.output_item.added", {"output_index": len(self.items) - 1, "item": dict(item)}

    def _done(self, item_id: str, **changes: Any) -> tuple[str, dict[str, Any]]:
        index = self.by_id[item_id]
        self.items[index].update(changes)
        return "response.output_item.done", {"output_index": index, "item": dict(self.items[index])}

    def feed(self, event: Event) -> list[tuple[str, dict[str, Any]]]:
        d = event.data
        if event.channel == "step" and d.get("type") == "iteration":
            return self._call(d)
        if event.channel == "approval" and d.get("status") == "requested":
            item = {"type": "mcp_approval_request", "id": d["approval_id"], "server_label": SERVER_LABEL,
                    "name": d.get("tool_name", ""), "arguments": _arguments(d.get("tool_args"))}
            return [self._add(item), self._done(item["id"])]
        if event.channel == "answer":
            return self._answer(d)
        return []

    def _call(self, d: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        call_id = str(d.get("tool_call_id") or "")
        out: list[tuple[str, dict[str, Any]]] = []
        if call_id not in self.by_id:
            out.append(self._add({"type": "mcp_call", "id": call_id, "server_label": SERVER_LABEL,
                                  "name": d.get("tool_name", ""), "arguments": _arguments(d.get("tool_args")),
                                  "output": None, "error": None, "status": "in_progress"}))
        if d.get("status") == "done":
            error = d.get("error")
            out.append(self._done(call_id, output=None if error else d.get("observation"),
                                  error=str(error) if error else None,
                                  status="failed" if error else "completed"))
        return out

    def _answer(self, d: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        mid, status = self.message_id, d.get("status")
        if status == "start" and mid not in self.by_id:
            self.text = ""
            added = self._add({"type": "message", "id": mid, "role": "assistant", "status": "in_progress",
                               "content": []})
            part = {"item_id": mid, "output_index": self.by_id[mid], "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": []}}
            return [added, ("response.content_part.added", part)]
        if mid not in self.by_id:
            return []
        index = self.by_id[mid]
        where = {"item_id": mid, "output_index": index, "content_index": 0}
        if status == "delta":
            self.text += str(d.get("content") or "")
            return [("response.output_text.delta", {**where, "delta": d.get("content") or "", "logprobs": []})]
        if status == "done":
            part = {"type": "output_text", "text": self.text, "annotations": []}
            return [("response.output_text.done", {**where, "text": self.text, "logprobs": []}),
                    ("response.content_part.done", {**where, "part": part}),
                    self._done(mid, status="completed", content=[part])]
        return []

    def final_answer(self, answer: str | None) -> None:
        """The stored answer when the stream did not carry it (a trimmed stream, a fallback)."""
        if answer is None or self.message_id in self.by_id:
            return
        part = {"type": "output_text", "text": answer, "annotations": []}
        self.by_id[self.message_id] = len(self.items)
        self.items.append({"type": "message", "id": self.message_id, "role": "assistant", "status": "completed",
                           "content": [part]})


def usage_of(result: dict[str, Any] | None) -> dict[str, Any] | None:
    u = (result or {}).get("usage") or None
    if not isinstance(u, dict):
        return None
    prompt, completion = int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)
    return {"input_tokens": prompt, "output_tokens": completion,
            "total_tokens": int(u.get("total_tokens") or prompt + completion),
            "input_tokens_details": {"cached_tokens": int(u.get("cached_tokens") or 0)},
            "output_tokens_details": {"reasoning_tokens": 0}}


def error_of(status: str, result: dict[str, Any] | None, events: list[Event]) -> dict[str, Any] | None:
    """``{code, message}`` of a failed run: its last ``error`` event, else its stored error."""
    if status != "failed":
        return None
    for e in reversed(events):
        if e.channel == "error":
            return {"code": str(e.data.get("kind") or "server_error"), "message": str(e.data.get("message") or "")}
    message = str((result or {}).get("error") or "the run failed")
    return {"code": "server_error", "message": message}


def response_object(run_id: str, status: str, created_at: float, request: dict[str, Any],
                    result: dict[str, Any] | None, events: list[Event], *,
                    previous: str | None = None) -> dict[str, Any]:
    """The Responses object of a run as it stands (``status``: the run's own)."""
    book = ItemBook(run_id)
    for e in events:
        book.feed(e)
    if status == "succeeded":
        book.final_answer((result or {}).get("answer"))
    meta = request.get("metadata") or {}
    schema = request.get("output_schema")
    fmt: dict[str, Any] = ({"type": "json_schema", "name": str(meta.get("responses.format_name") or "output"),
                            "schema": schema, "strict": True} if schema else {"type": "text"})
    return {
        "id": response_id(run_id), "object": "response", "created_at": int(created_at),
        "status": STATUS.get(status, status), "model": request.get("model") or "",
        "output": book.items, "usage": usage_of(result), "error": error_of(status, result, events),
        "incomplete_details": None, "instructions": request.get("system_prompt"),
        "metadata": {k: v for k, v in meta.items() if isinstance(v, str) and not k.startswith("responses.")},
        "previous_response_id": previous or meta.get("responses.previous"), "background": bool(meta.get("responses.background")),
        "parallel_tool_calls": True, "tool_choice": "auto",
        "tools": [{"type": "function", "name": n, "parameters": None, "strict": None}
                  for n in (request.get("tools") or [])],
        "text": {"format": fmt}, "temperature": None, "top_p": None,
        "max_output_tokens": request.get("token_budget"),
    }
