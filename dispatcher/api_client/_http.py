"""httpx details both clients share: building the ``httpx`` client's options, reading an
error answer, and turning transport exceptions into the client's errors."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx

from reactq.dispatcher.api_client._core import RETRY_STATUSES, Call
from reactq.dispatcher.api_client.errors import APIConnectionError, APIError, APITimeoutError, error_from_response

T = TypeVar("T")

#: Default seconds for connecting, writing and waiting for an answer.
DEFAULT_TIMEOUT = 30.0
#: An event stream's read timeout: the gateway sends a keep-alive every 15 s by default, so
#: a silent minute means the connection is dead and the stream reconnects.
STREAM_READ_TIMEOUT = 60.0


def options(base_url: str, api_key: str | None, timeout: float | httpx.Timeout) -> dict[str, Any]:
    headers = {"User-Agent": "reactq-client", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return {"base_url": base_url.rstrip("/"), "headers": headers,
            "timeout": timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)}


def stream_timeout(timeout: httpx.Timeout) -> httpx.Timeout:
    return httpx.Timeout(timeout.connect, read=max(timeout.read or 0.0, STREAM_READ_TIMEOUT),
                         write=timeout.write, pool=timeout.pool)


def error_of(response: httpx.Response) -> APIError:
    """The error an answer with status ≥ 400 stands for (its body must have been read)."""
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    return error_from_response(response.status_code, body, {k.lower(): v for k, v in response.headers.items()})


def transport_error(exc: httpx.TransportError) -> APIConnectionError:
    kind = APITimeoutError if isinstance(exc, httpx.TimeoutException) else APIConnectionError
    err = kind(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, code="connection_error")
    err.__cause__ = exc
    return err


def unsent(exc: httpx.TransportError) -> bool:
    """Nothing reached the server: every call may be sent again."""
    return isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))


def retryable(call: Call[Any], error: APIError, cause: httpx.TransportError | None) -> bool:
    if cause is not None:
        return call.retry or unsent(cause)
    return call.retry and error.status_code in RETRY_STATUSES


def parse(call: Call[T], response: httpx.Response) -> T:
    body: Any = response.json() if response.content else {}
    return call.parse(body)
