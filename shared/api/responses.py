"""``/v1/responses``: the bodies of OpenAI's Responses API as reactq answers them.

Only the fields reactq sets are described; the object carries more of OpenAI's (``tools``,
``text``, ``instructions``, …), kept by ``extra="allow"``. Errors on these routes are
OpenAI-shaped (``OpenAIErrorResponse``), not reactq's ``ErrorResponse``.
"""

from __future__ import annotations

from typing import Any, Literal

from reactq.shared.api.base import ApiModel

__all__ = ["OPENAI_ERROR_TYPES", "OpenAIError", "OpenAIErrorResponse", "OutputItem", "ResponseObject",
           "ResponseUsage"]

#: ``error.type`` by HTTP status (a 5xx: ``server_error``; any other: ``invalid_request_error``).
OPENAI_ERROR_TYPES = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}


class OpenAIError(ApiModel):
    message: str
    """What went wrong, for a person."""
    type: str
    """``invalid_request_error``, ``authentication_error``, ``permission_error``, ``rate_limit_error`` or ``server_error``."""
    code: str | None = None
    """reactq's error code (``validation_error``, ``not_found``, …); ``invalid_api_key`` for a 401."""
    param: str | None = None
    """The request field at fault, when one is."""


class OpenAIErrorResponse(ApiModel):
    """Every error answer of ``/v1/responses``."""

    error: OpenAIError


class OutputItem(ApiModel):
    """An output item: ``mcp_call`` (a tool call the run made: ``server_label``, ``name``,
    ``arguments``, ``output``, ``error``), ``mcp_approval_request`` (a call waiting for a person:
    ``server_label``, ``name``, ``arguments``) or ``message`` (the answer: ``role``, ``content``)."""

    type: Literal["mcp_call", "mcp_approval_request", "message"]
    id: str
    """The tool call's id, the approval's id, or ``msg_<run id>``."""


class ResponseUsage(ApiModel):
    input_tokens: int
    output_tokens: int
    total_tokens: int


class ResponseObject(ApiModel):
    """A response: a reactq run as the Responses API shows it."""

    id: str
    """``resp_<run id>``."""
    object: Literal["response"]
    created_at: int
    status: Literal["queued", "in_progress", "completed", "failed", "cancelled", "incomplete"]
    """``incomplete``: the run waits for a person to decide an ``mcp_approval_request``."""
    model: str
    output: list[OutputItem]
    usage: ResponseUsage | None = None
    error: dict[str, Any] | None = None
    """``{code, message}`` of a failed run."""
    metadata: dict[str, str] = {}
