"""ASGI middleware of the gateway: the body-size limit and the bearer token.

Plain ASGI (not Starlette's ``BaseHTTPMiddleware``) so SSE responses stream through untouched.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Probes answer without the token: a kubelet or a load balancer has none.
OPEN_PATHS = ("/healthz", "/readyz")


async def send_json(send: Send, status: int, body: dict[str, Any],
                    headers: list[tuple[bytes, bytes]] | None = None) -> None:
    data = json.dumps(body).encode()
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
        return {"detail": f"request body is larger than {self.limit} bytes (REACTQ_MAX_BODY_BYTES)"}

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


class BearerAuth:
    """Every route but the probes needs ``Authorization: Bearer <token>``."""

    OPEN = OPEN_PATHS

    def __init__(self, app: ASGIApp, token: Any) -> None:
        self.app = app
        # Settings may hold the token as a pydantic SecretStr (kept out of reprs and logs).
        raw = token.get_secret_value() if hasattr(token, "get_secret_value") else str(token)
        self.token = raw.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.OPEN:
            await self.app(scope, receive, send)
            return
        auth = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, given = auth.partition(b" ")
        # compare_digest: the time taken must not reveal how much of the token matched.
        if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self.token):
            await send_json(send, 401, {"detail": "missing or invalid bearer token (REACTQ_API_TOKEN)"},
                            [(b"www-authenticate", b"Bearer")])
            return
        await self.app(scope, receive, send)
