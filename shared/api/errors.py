"""The one error shape of the HTTP API: every 4xx and 5xx body is an ``ErrorResponse``.

``{"error": {"code": "not_found", "message": "no run with id 'x'", "field": "run_id",
"details": [...]}}``. ``code`` comes from a closed list (``ERROR_CODES``), one per status;
``field`` is the dotted path of the offending input when one field is at fault; ``details``
lists every problem of a validation error. Messages and details never echo more than a few
hundred characters of what the client sent.

Pure pydantic (no web framework): the gateway builds these bodies and a client parses them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ErrorCode = Literal[
    "bad_request", "unauthorized", "forbidden", "not_found", "method_not_allowed", "conflict",
    "payload_too_large", "unsupported_media_type", "validation_error", "rate_limited",
    "internal_error", "unavailable",
]

#: The closed list: HTTP status → ``code``.
ERROR_CODES: dict[int, ErrorCode] = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 409: "conflict", 413: "payload_too_large",
    415: "unsupported_media_type", 422: "validation_error", 429: "rate_limited",
    500: "internal_error", 503: "unavailable",
}

#: Characters of a message, and of an offending input value, that an error may carry.
MESSAGE_CHARS = 300
INPUT_CHARS = 80
#: Validation problems listed in ``details`` at most.
MAX_DETAILS = 20


def clip(text: str, limit: int = MESSAGE_CHARS) -> str:
    """``text`` cut to ``limit`` characters (an error never echoes a whole input)."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} chars)"


def code_for(status: int) -> ErrorCode:
    """The ``code`` of ``status``; a status outside the list maps to its class's catch-all."""
    if status in ERROR_CODES:
        return ERROR_CODES[status]
    return "internal_error" if status >= 500 else "bad_request"


class ErrorDetail(BaseModel):
    """One problem of a request that was refused (a validation error lists each)."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="allow")

    message: str
    """What is wrong, naming the limit where there is one."""
    field: str | None = None
    """Dotted path of the offending input (``query``, ``steps.0.id``, ``limit``, ``last-event-id``)."""
    location: Literal["body", "query", "path", "header", "cookie"] | None = None
    """Where the field was sent."""
    type: str | None = None
    """A machine-readable kind of problem (``missing``, ``string_too_long``, ``json_invalid``, …)."""
    input: Any = None
    """The offending value, cut short (at most 80 characters)."""


class ErrorInfo(BaseModel):
    """What went wrong: a code from a closed list, a message for people, the field at fault."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="allow",
                              json_schema_extra={"examples": [
                                  {"code": "not_found", "message": "no run with id 'abc' (it may have expired)"},
                                  {"code": "validation_error", "message": "query: Field required",
                                   "field": "query", "details": [{"message": "Field required",
                                                                  "field": "query", "location": "body",
                                                                  "type": "missing"}]}]})

    code: ErrorCode
    """One per status: 400 bad_request, 401 unauthorized, 403 forbidden, 404 not_found,
    405 method_not_allowed, 409 conflict, 413 payload_too_large, 415 unsupported_media_type,
    422 validation_error, 429 rate_limited, 500 internal_error, 503 unavailable."""
    message: str = Field(..., max_length=MESSAGE_CHARS + 40)
    """What went wrong, for people (at most a few hundred characters)."""
    field: str | None = None
    """Dotted path of the input at fault, when one field is."""
    details: list[ErrorDetail] | None = None
    """Every problem, for a validation error with several."""


class ErrorResponse(BaseModel):
    """The body of every 4xx and 5xx answer."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    error: ErrorInfo
    """The error."""


def error_body(status: int, message: str, *, field: str | None = None,
               details: list[dict[str, Any]] | None = None, code: ErrorCode | None = None) -> dict[str, Any]:
    """The JSON body of an error answer with ``status`` (``code`` from the closed list)."""
    info: dict[str, Any] = {"code": code or code_for(status), "message": clip(message)}
    if field:
        info["field"] = clip(field, INPUT_CHARS)
    if details:
        info["details"] = [_clipped(d) for d in details[:MAX_DETAILS]]
    return {"error": info}


def _clipped(detail: dict[str, Any]) -> dict[str, Any]:
    """A detail whose message and input are cut short (whoever built it)."""
    out = dict(detail)
    if isinstance(out.get("message"), str):
        out["message"] = clip(out["message"])
    if "input" in out:
        out["input"] = short_input(out["input"])
    return out


def short_input(value: Any) -> Any:
    """An offending input value as an error may show it: scalars as they are (strings cut
    short), anything else as its cut-short ``repr``."""
    if isinstance(value, str):
        return clip(value, INPUT_CHARS)
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    return clip(repr(value), INPUT_CHARS)


_WHERE = ("body", "query", "path", "header", "cookie")


def validation_detail(err: dict[str, Any]) -> dict[str, Any]:
    """One pydantic / FastAPI validation error (``{type, loc, msg, input}``) as an ``ErrorDetail``."""
    loc = [str(p) for p in err.get("loc", ())]
    where = loc[0] if loc and loc[0] in _WHERE else None
    path = loc[1:] if where else loc
    out: dict[str, Any] = {"message": clip(str(err.get("msg", "invalid")))}
    if path:
        out["field"] = clip(".".join(path), INPUT_CHARS)
    if where:
        out["location"] = where
    if err.get("type"):
        out["type"] = str(err["type"])
    if "input" in err and err.get("type") != "missing":
        out["input"] = short_input(err["input"])
    return out


def validation_body(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """A 422 ``validation_error`` listing ``errors`` (pydantic's shape); ``field`` and
    ``message`` are the first problem's."""
    details = [validation_detail(e) for e in errors[:MAX_DETAILS]] or [{"message": "invalid request"}]
    first = details[0]
    msg = f"{first['field']}: {first['message']}" if first.get("field") else first["message"]
    if len(errors) > 1:
        msg += f" (and {len(errors) - 1} more)"
    return error_body(422, msg, field=first.get("field"), details=details)
