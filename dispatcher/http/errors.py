"""The gateway's error responses and exception handlers: one shape for every 4xx.

Validation errors use FastAPI's shape ``{"detail": [{"type", "loc", "msg"}]}`` so clients
parse one format; ``loc`` names the field.
"""

from __future__ import annotations

from typing import Any

import redis
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from reactq.shared.errors import RunNotFound


def field_error(field: str | None, msg: str, *, where: str = "body", status: int = 422) -> JSONResponse:
    """A 422 naming ``where`` / ``field`` (``where`` is body, path, query or header)."""
    loc = [where, field] if field else [where]
    return JSONResponse({"detail": [{"type": "value_error", "loc": loc, "msg": msg}]}, status_code=status)


def not_found(exc: Exception | str) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=404)


def conflict(msg: str) -> JSONResponse:
    return JSONResponse({"detail": msg}, status_code=409)


async def _redis_down(_: Request, exc: Exception) -> JSONResponse:
    """Redis unreachable is the service's problem, not the caller's: 503, not a bare 500."""
    return JSONResponse({"detail": f"Redis is unreachable: {type(exc).__name__}"}, status_code=503,
                        headers={"Retry-After": "1"})


async def _not_found(_: Request, exc: Exception) -> JSONResponse:
    return not_found(exc)


def install(app: FastAPI) -> None:
    """Register the gateway's exception handlers on ``app``."""
    handlers: list[tuple[type[Exception], Any]] = [
        (redis.ConnectionError, _redis_down), (redis.TimeoutError, _redis_down),
        (RunNotFound, _not_found),
    ]
    for exc_type, handler in handlers:
        app.add_exception_handler(exc_type, handler)
