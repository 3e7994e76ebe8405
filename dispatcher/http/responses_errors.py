"""OpenAI-shaped errors on ``/v1/responses`` (only there): what the ``openai`` client parses.

The gateway answers every error in its own shape (``{"error": {"code", "message", "field"}}``);
this middleware, wrapped around the whole app, rewrites the error answers of the Responses
routes — a missing key (401), a refused body (413, 415), a validation error, a 404 of another
tenant's response — into ``{"error": {"message", "type", "code", "param"}}``. A refused
request (``validation_error``) is a 400 ``invalid_request_error`` here, as OpenAI answers it;
``param`` names the field.
"""

from __future__ import annotations

import json
from typing import Any

from reactq.dispatcher.http.middleware import ASGIApp, Message, Receive, Scope, Send
from reactq.shared.api.responses import OPENAI_ERROR_TYPES, OpenAIErrorResponse

__all__ = ["OPENAI_ERRORS", "OpenAIErrors", "PREFIX", "openai_error"]

PREFIX = "/v1/responses"

#: The error answers of the Responses routes, for their OpenAPI description.
OPENAI_ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": OpenAIErrorResponse, "description": f"OpenAI-shaped error ({s})"}
    for s in (400, 401, 403, 404, 409, 413, 415, 422, 429, 500, 503)}


def openai_error(status: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """(status, OpenAI-shaped body) of a gateway error answer."""
    err = body.get("error") if isinstance(body.get("error"), dict) else {}
    assert isinstance(err, dict)
    code = err.get("code")
    param = err.get("field")
    if param is None and err.get("details"):
        param = (err["details"][0] or {}).get("field")
    if isinstance(param, str) and param.startswith("body."):
        param = param[5:]
    if status == 422:
        status = 400
    if status == 401:
        code = "invalid_api_key"
    kind = "server_error" if status >= 500 else OPENAI_ERROR_TYPES.get(status, "invalid_request_error")
    return status, {"error": {"message": str(err.get("message") or "request refused"), "type": kind,
                              "code": code, "param": param}}


class OpenAIErrors:
    """Rewrites the JSON error answers of ``/v1/responses…`` (plain ASGI: streams pass through)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(PREFIX):
            await self.app(scope, receive, send)
            return
        held: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def rewrite(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] >= 400:
                held["start"] = message
                return
            if "start" not in held or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            await self._send(send, held["start"], b"".join(chunks))

        await self.app(scope, receive, rewrite)

    @staticmethod
    async def _send(send: Send, start: Message, raw: bytes) -> None:
        status = int(start["status"])
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"error": {"message": raw.decode(errors="replace")[:300]}}
        status, out = openai_error(status, body if isinstance(body, dict) else {})
        data = json.dumps(out, ensure_ascii=False).encode()
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() not in (b"content-length", b"content-type")]
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                                *headers]})
        await send({"type": "http.response.body", "body": data})
