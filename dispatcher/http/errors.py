"""The gateway's error responses and exception handlers: one shape for every 4xx.

Validation errors use FastAPI's shape ``{"detail": [{"type", "loc", "msg"}]}`` so clients
parse one format; ``loc`` names the field. No response echoes more than a few hundred
characters of what the client sent (a 100,000-character query is not sent back).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from reactq.shared.errors import RequestError, RunNotFound, TooManyRequests
from reactq.shared.inputs import clip

#: Characters of a message or of the offending input a 4xx may carry.
MSG_CHARS = 300
INPUT_CHARS = 80


def field_error(field: str | None, msg: str, *, where: str = "body", status: int = 422) -> JSONResponse:
    """A 422 naming ``where`` / ``field`` (``where`` is body, path, query or header)."""
    loc = [where, field] if field else [where]
    return JSONResponse({"detail": [{"type": "value_error", "loc": loc, "msg": clip(msg, MSG_CHARS)}]},
                        status_code=status)


class Forbidden(Exception):
    """The caller's key lacks ``scope`` (HTTP 403 naming it)."""

    def __init__(self, scope: str) -> None:
        super().__init__(f"this API key lacks the scope {scope!r}")
        self.scope = scope


def forbidden(scope: str) -> JSONResponse:
    return JSONResponse({"detail": f"this API key lacks the scope {scope!r}", "scope": scope},
                        status_code=403)


def not_found(exc: Exception | str) -> JSONResponse:
    return JSONResponse({"detail": clip(str(exc), MSG_CHARS)}, status_code=404)


def conflict(msg: str) -> JSONResponse:
    return JSONResponse({"detail": clip(msg, MSG_CHARS)}, status_code=409)


def interrupt_reply(send: Callable[[], str], id_field: str) -> Any:
    """``{"id": …}`` of a follow-up sent to a run or DAG: 409 when it already ended (the
    handle names ``id_field``), 422 naming a bad field, 429 (raised) when it holds too many."""
    try:
        return {"id": send()}
    except TooManyRequests:
        raise
    except RequestError as exc:
        return conflict(str(exc)) if exc.field == id_field else field_error(exc.field, str(exc))


def _short_input(value: Any) -> Any:
    if isinstance(value, str):
        return clip(value, INPUT_CHARS)
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    return clip(repr(value), INPUT_CHARS)  # a dict or list: its shape, cut short


def _clip_error(err: dict[str, Any]) -> dict[str, Any]:
    out = {"type": err.get("type", "value_error"), "loc": [str(p) for p in err.get("loc", ())],
           "msg": clip(str(err.get("msg", "")), MSG_CHARS)}
    if "input" in err:
        out["input"] = _short_input(err["input"])
    return out


async def _validation(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return JSONResponse({"detail": [_clip_error(dict(e)) for e in exc.errors()[:20]]}, status_code=422)


#: Seconds a 429 asks the client to wait (``Retry-After``).
RETRY_AFTER_S = 1


async def _request_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestError)
    if isinstance(exc, TooManyRequests):
        res = field_error(exc.field, str(exc), status=429)
        res.headers["Retry-After"] = str(RETRY_AFTER_S)
        return res
    return field_error(exc.field, str(exc))


async def _redis_down(_: Request, exc: Exception) -> JSONResponse:
    """Redis unreachable is the service's problem, not the caller's: 503, not a bare 500."""
    return JSONResponse({"detail": f"Redis is unreachable: {type(exc).__name__}"}, status_code=503,
                        headers={"Retry-After": "1"})


async def _not_found(_: Request, exc: Exception) -> JSONResponse:
    return not_found(exc)


async def _forbidden(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Forbidden)
    return forbidden(exc.scope)


def install(app: FastAPI) -> None:
    """Register the gateway's exception handlers on ``app``."""
    handlers: list[tuple[type[Exception], Any]] = [
        (redis.ConnectionError, _redis_down), (redis.TimeoutError, _redis_down),
        # A cluster client that reaches no node raises this (not a ConnectionError).
        (redis.exceptions.RedisClusterException, _redis_down),
        (RunNotFound, _not_found), (RequestError, _request_error), (Forbidden, _forbidden),
        (RequestValidationError, _validation),
    ]
    for exc_type, handler in handlers:
        app.add_exception_handler(exc_type, handler)
