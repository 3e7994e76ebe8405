"""The HTTP client's errors: one type per kind of answer, read from the gateway's error body.

    ReactqError
    └── APIError                 status_code, code, message, field, details, retry_after
        ├── BadRequest           400 bad_request, 405, 413, 415
        ├── Unauthorized         401 unauthorized: no key, or a bad or revoked one
        ├── Forbidden            403 forbidden: the key lacks the scope the message names
        ├── NotFound             404 not_found: no such run, DAG, batch, thread (or another tenant's)
        ├── Conflict             409 conflict: the act does not fit the object's state
        ├── InvalidRequest       422 validation_error: ``field`` names the offending field
        ├── RateLimited          429 rate_limited: ``retry_after`` seconds, when the gateway said
        ├── ServerError          5xx internal_error / unavailable
        └── APIConnectionError   no answer at all: refused, reset, or …
            └── APITimeoutError  … no answer within the client's timeout

The body is ``{"error": {"code", "message", "field"?, "details"?}}``; the older shapes
(``{"detail": "<text>"}`` and FastAPI's ``{"detail": [{"loc", "msg", …}]}``) are read too.
"""

from __future__ import annotations

from typing import Any

from reactq.shared.errors import ReactqError, RequestError

#: Characters of a body quoted in a message when it is not JSON.
_QUOTE = 300


class APIError(ReactqError):
    """The gateway answered with an error (or did not answer: ``status_code`` None)."""

    def __init__(self, message: str, *, status_code: int | None = None, code: str = "error",
                 field: str | None = None, details: list[Any] | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.code = code
        self.field = field
        self.details = details or []
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.message, self.status_code, self.code, self.field, self.details,
                           self.retry_after))

    def __str__(self) -> str:
        where = f" ({self.field})" if self.field else ""
        status = f"{self.status_code} " if self.status_code is not None else ""
        return f"{status}{self.code}{where}: {self.message}"


def _rebuild(cls: type[APIError], message: str, status_code: int | None, code: str, field: str | None,
             details: list[Any], retry_after: float | None) -> APIError:
    return cls(message, status_code=status_code, code=code, field=field, details=details,
               retry_after=retry_after)


class BadRequest(APIError):
    """400 and the other refusals of the request's form (405, 413, 415)."""


class Unauthorized(APIError):
    """401: no key, or a key the gateway does not accept."""


class Forbidden(APIError):
    """403: the key lacks the scope the message names."""


class NotFound(APIError):
    """404: no such object (expired, never made, or another tenant's)."""


class Conflict(APIError):
    """409: the act does not fit the object's state (it ended; a thread is busy; …)."""


class InvalidRequest(APIError, RequestError):
    """422: a request refused at the door; ``field`` names the field and the message the limit."""


class RateLimited(APIError):
    """429: too many requests now; ``retry_after`` seconds when the gateway said."""


class ServerError(APIError):
    """5xx: the gateway (or what it needs, e.g. Redis) failed; retried where safe."""


class APIConnectionError(APIError):
    """No answer: the connection was refused, reset or broken."""


class APITimeoutError(APIConnectionError):
    """No answer within the client's timeout."""


_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 405: BadRequest, 409: Conflict,
    413: BadRequest, 415: BadRequest, 422: InvalidRequest, 429: RateLimited,
}
_CODES: dict[int, str] = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
    409: "conflict", 413: "payload_too_large", 415: "unsupported_media_type", 422: "validation_error",
    429: "rate_limited", 500: "internal_error", 503: "unavailable",
}


def error_class(status: int) -> type[APIError]:
    if status >= 500:
        return ServerError
    return _BY_STATUS.get(status, APIError)


def _retry_after(headers: dict[str, str]) -> float | None:
    raw = headers.get("retry-after")
    try:
        return None if raw is None else max(0.0, float(raw))
    except ValueError:
        return None  # an HTTP date: rare from this gateway; the caller backs off on its own


def _legacy_field(loc: list[Any]) -> str | None:
    """FastAPI's ``loc`` without its ``body`` / ``query`` / ``path`` / ``header`` head."""
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return ".".join(parts) or None


def _parts(status: int, body: Any) -> tuple[str, str, str | None, list[Any]]:
    """(code, message, field, details) from either body shape."""
    default = _CODES.get(status, "internal_error" if status >= 500 else "error")
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        e = body["error"]
        details = e.get("details")
        return (str(e.get("code") or default), str(e.get("message") or ""), e.get("field"),
                details if isinstance(details, list) else [])
    if isinstance(body, dict) and "detail" in body:
        detail = body["detail"]
        extra = {k: v for k, v in body.items() if k != "detail"}
        if isinstance(detail, list) and detail and isinstance(detail[0], dict):
            first = detail[0]
            field = _legacy_field(list(first.get("loc") or []))
            return default, str(first.get("msg") or ""), field, detail
        return default, str(detail), None, [extra] if extra else []
    text = body if isinstance(body, str) else repr(body)
    return default, text[:_QUOTE], None, []


def error_from_response(status: int, body: Any, headers: dict[str, str]) -> APIError:
    """The error a 4xx/5xx answer stands for (``headers`` with lower-case names)."""
    code, message, field, details = _parts(status, body)
    return error_class(status)(message or f"HTTP {status}", status_code=status, code=code, field=field,
                               details=details, retry_after=_retry_after(headers))


__all__ = ["APIConnectionError", "APIError", "APITimeoutError", "BadRequest", "Conflict", "Forbidden",
           "InvalidRequest", "NotFound", "RateLimited", "ServerError", "Unauthorized", "error_class",
           "error_from_response"]
