"""ASGI middleware of the gateway: the body-size limit and strict JSON (API keys: ``auth``).

Plain ASGI (not Starlette's ``BaseHTTPMiddleware``) so SSE responses stream through untouched.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from reactq.shared.api.errors import error_body
from reactq.shared.errors import RequestError
from reactq.shared.inputs import loads_strict

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Probes answer without the token: a kubelet or a load balancer has none.
OPEN_PATHS = ("/healthz", "/readyz")


async def send_json(send: Send, status: int, body: dict[str, Any],
                    headers: list[tuple[bytes, bytes]] | None = None) -> None:
    data = json.dumps(body, ensure_ascii=False).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": data})


class BodyLimit:
    """413 for bodies over ``limit`` bytes: at once from ``Content-Length``, and while
    reading for chunked bodies (the app is then told the client went away, and whatever it
    answers is dropped: the 413 was already sent)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    def _too_large(self) -> dict[str, Any]:
        return error_body(413, f"request body is larger than {self.limit} bytes (REACTQ_MAX_BODY_BYTES)")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await send_json(send, 413, self._too_large())
            return
        seen = 0
        refused = False

        async def limited_receive() -> Message:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    refused = True
                    await send_json(send, 413, self._too_large())
                    return {"type": "http.disconnect"}
            return msg

        async def guarded_send(msg: Message) -> None:
            if not refused:
                await send(msg)

        await self.app(scope, limited_receive, guarded_send)


_JSON_TYPES = ("", "application/json")
#: Bodies of lines (a JSONL batch): passed through, each line is checked on its own.
LINE_TYPES = ("application/x-ndjson", "application/jsonl", "application/x-jsonlines", "text/plain")


class StrictJson:
    """A JSON body must be strict JSON before any route sees it: UTF-8, no NaN / Infinity,
    no lone surrogates, at most ``MAX_DEPTH`` deep (``reactq.shared.inputs``). Refused with a
    422 naming ``body``; bodies of lines (JSONL batches) pass through to be checked per line;
    a body of any other media type is refused (415)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        ctype = dict(scope.get("headers") or []).get(b"content-type", b"").decode("latin-1")
        main = ctype.split(";")[0].strip().lower()
        is_json = main in _JSON_TYPES or main.endswith("+json")
        if not is_json and main in LINE_TYPES:
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        if body is None:
            return  # the client went away (or BodyLimit refused the body)
        if body.strip():
            problem = _json_problem(body) if is_json else (
                415, f"request body of type {main[:60]!r}: send application/json")
            if problem is not None:
                status, msg = problem
                details = [{"message": msg, "location": "body", "type": "json_invalid"}] if status == 422 else None
                await send_json(send, status, error_body(status, msg, details=details))
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body, or None when the client went away first."""
    chunks: list[bytes] = []
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            return None
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body"):
            return b"".join(chunks)


def _json_problem(body: bytes) -> tuple[int, str] | None:
    try:
        loads_strict(body, field=None)
    except RequestError as exc:
        return 422, f"request body {exc}"
    return None
