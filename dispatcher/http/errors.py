"""The gateway's error answers: one shape for every 4xx and 5xx.

Every error body is ``{"error": {"code", "message", "field"?, "details"?}}``
(``reactq.shared.api.errors``): FastAPI's validation errors, the routes' own refusals (the
helpers below), the middleware (body limit, strict JSON, token), a route or method that does
not exist, Redis being down and any unexpected exception are all mapped to it here.
``Retry-After`` goes with every 429 and 503. No answer echoes more than a few hundred
characters of what the client sent.

Routes call ``field_error`` (422 naming the field), ``not_found`` (404), ``conflict`` (409),
``error_response`` (any other status) or raise ``RequestError`` / ``RunNotFound``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError, ResponseValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from reactq.shared.api.errors import ErrorResponse, error_body, validation_body
from reactq.shared.api.runs import InterruptAccepted
from reactq.shared.errors import Forbidden, ForkConflict, RequestError, RunNotFound, TooManyRequests

log = logging.getLogger("reactq.http")

#: Seconds a client waits before retrying a 429 or a 503.
RETRY_AFTER_S = 1

__all__ = ["ERROR_RESPONSES", "Forbidden", "conflict", "error_response", "field_error", "forbidden", "install",
           "interrupt_reply", "not_found", "responses"]


def error_response(status: int, message: str, *, field: str | None = None,
                   details: list[dict[str, Any]] | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    """An error answer with ``status`` in the one shape (``Retry-After`` on 429 and 503)."""
    hdrs = dict(headers or {})
    if status in (429, 503):
        hdrs.setdefault("Retry-After", str(RETRY_AFTER_S))
    return JSONResponse(error_body(status, message, field=field, details=details), status_code=status,
                        headers=hdrs or None)


def field_error(field: str | None, msg: str, *, where: str | None = "body", status: int = 422) -> JSONResponse:
    """A 422 ``validation_error`` naming ``field`` (sent in ``where``: body, path, query, header)."""
    detail: dict[str, Any] = {"message": msg}
    if where:
        detail["location"] = where
    if field:
        detail["field"] = field
    return error_response(status, msg, field=field, details=[detail])


def forbidden(scope: str) -> JSONResponse:
    """A 403 ``forbidden`` naming the scope the key lacks."""
    msg = f"this API key lacks the scope {scope!r}"
    return error_response(403, msg, details=[{"message": msg, "scope": scope}])


def not_found(exc: Exception | str) -> JSONResponse:
    """A 404 ``not_found``."""
    return error_response(404, str(exc))


def conflict(msg: str, **extra: Any) -> JSONResponse:
    """A 409 ``conflict``: the object is in a state that cannot take the request (it ended)."""
    return error_response(409, msg, details=[{"message": msg, **extra}] if extra else None)


def interrupt_reply(send: Callable[[], str], id_field: str) -> Any:
    """``InterruptAccepted`` for a follow-up sent to a run or DAG: 409 when it already ended
    (the handle names ``id_field``), 422 naming a bad field, 429 (raised) when it holds too many."""
    try:
        return InterruptAccepted(interrupt_id=send())
    except TooManyRequests:
        raise
    except RequestError as exc:
        return conflict(str(exc)) if exc.field == id_field else field_error(exc.field, str(exc))


def _error_model(description: str) -> dict[str, Any]:
    return {"model": ErrorResponse, "description": description}


#: Error answers of the OpenAPI description, by status.
ERROR_RESPONSES: dict[int, dict[str, Any]] = {
    401: _error_model("`unauthorized`: the bearer token is missing or wrong (when the API needs one)"),
    403: _error_model("`forbidden`: the key does not allow this (its message names the scope it lacks)"),
    404: _error_model("`not_found`: no such object (or it expired)"),
    409: _error_model("`conflict`: the object has ended or is busy, so it cannot take this"),
    413: _error_model("`payload_too_large`: the body is over `REACTQ_MAX_BODY_BYTES`"),
    415: _error_model("`unsupported_media_type`: the body's content type is not accepted"),
    422: _error_model("`validation_error`: bad input; `field` names it"),
    429: _error_model("`rate_limited`: a limit was reached; see `Retry-After`"),
    500: _error_model("`internal_error`: a bug; the gateway logged it"),
    503: _error_model("`unavailable`: Redis or the broker cannot be reached; see `Retry-After`"),
}
#: What any route may answer (the app adds these to every operation).
COMMON_ERRORS = (401, 403, 422, 500, 503)


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route that may also answer ``statuses``."""
    return {s: ERROR_RESPONSES[s] for s in statuses}


async def _validation(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return JSONResponse(validation_body([dict(e) for e in exc.errors()]), status_code=422)


#: Seconds a 429 asks the client to wait (``Retry-After``).
RETRY_AFTER_S = 1


async def _request_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestError)
    if isinstance(exc, TooManyRequests):
        return error_response(429, str(exc), field=exc.field)
    return field_error(exc.field, str(exc), where=None)


async def _redis_down(_: Request, exc: Exception) -> JSONResponse:
    """Redis unreachable is the service's problem, not the caller's: 503, not a bare 500."""
    return error_response(503, f"Redis is unreachable: {type(exc).__name__}")


async def _not_found(_: Request, exc: Exception) -> JSONResponse:
    return not_found(exc)


async def _forbidden(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Forbidden)
    return forbidden(exc.scope)


async def _http(_: Request, exc: Exception) -> JSONResponse:
    """Starlette's own answers (no such route, method not allowed …) in the one shape."""
    assert isinstance(exc, StarletteHTTPException)
    message = exc.detail if isinstance(exc.detail, str) else "request refused"
    return error_response(exc.status_code, message, headers=dict(exc.headers or {}))


async def _internal(request: Request, exc: Exception) -> JSONResponse:
    """Anything unexpected: logged with its traceback, answered in the one shape."""
    if isinstance(exc, ResponseValidationError):  # (others are logged by the server itself)
        log.error("%s %s: the answer does not match its declared model: %s", request.method,
                  request.url.path, exc.errors()[:3])
    return error_response(500, "internal error (the gateway logged it)")


async def _fork_conflict(_: Request, exc: Exception) -> JSONResponse:
    return conflict(str(exc))


def install(app: FastAPI) -> None:
    """Register the gateway's exception handlers on ``app``."""
    handlers: list[tuple[type[Exception], Any]] = [
        (redis.ConnectionError, _redis_down), (redis.TimeoutError, _redis_down),
        # A cluster client that reaches no node raises this (not a ConnectionError).
        (redis.exceptions.RedisClusterException, _redis_down),
        (RunNotFound, _not_found), (RequestError, _request_error), (Forbidden, _forbidden),
        (ForkConflict, _fork_conflict),
        (RequestValidationError, _validation), (StarletteHTTPException, _http),
        (ResponseValidationError, _internal), (Exception, _internal),
    ]
    for exc_type, handler in handlers:
        app.add_exception_handler(exc_type, handler)
