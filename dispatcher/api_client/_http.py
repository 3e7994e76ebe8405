"""httpx2 details both clients share: building the ``httpx2`` client's options, reading an
error answer, and turning transport exceptions into the client's errors."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx2

from reactq.dispatcher.api_client._core import RETRY_STATUSES, Call
from reactq.dispatcher.api_client.errors import APIConnectionError, APIError, APITimeoutError, error_from_response

T = TypeVar("T")

#: Default seconds for connecting, writing and waiting for an answer.
DEFAULT_TIMEOUT = 30.0
#: An event stream's read timeout: the gateway sends a keep-alive every 15 s by default, so
#: a silent minute means the connection is dead and the stream reconnects.
STREAM_READ_TIMEOUT = 60.0


def options(base_url: str, api_key: str | None, timeout: float | httpx2.Timeout) -> dict[str, Any]:
    headers = {"User-Agent": "reactq-client", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return {"base_url": base_url.rstrip("/"), "headers": headers,
            "timeout": timeout if isinstance(timeout, httpx2.Timeout) else httpx2.Timeout(timeout)}


def stream_timeout(timeout: httpx2.Timeout) -> httpx2.Timeout:
    return httpx2.Timeout(timeout.connect, read=max(timeout.read or 0.0, STREAM_READ_TIMEOUT),
                         write=timeout.write, pool=timeout.pool)


def error_of(response: httpx2.Response) -> APIError:
    """The error an answer with status ≥ 400 stands for (its body must have been read)."""
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    return error_from_response(response.status_code, body, {k.lower(): v for k, v in response.headers.items()})


def transport_error(exc: httpx2.TransportError) -> APIConnectionError:
    kind = APITimeoutError if isinstance(exc, httpx2.TimeoutException) else APIConnectionError
    err = kind(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, code="connection_error")
    err.__cause__ = exc
    return err


def unsent(exc: httpx2.TransportError) -> bool:
    """Nothing reached the server: every call may be sent again."""
    return isinstance(exc, (httpx2.ConnectError, httpx2.ConnectTimeout))


def retryable(call: Call[Any], error: APIError, cause: httpx2.TransportError | None) -> bool:
    if cause is not None:
        return call.retry or unsent(cause)
    return call.retry and error.status_code in RETRY_STATUSES


def parse(call: Call[T], response: httpx2.Response) -> T:
    body: Any = response.json() if response.content else {}
    return call.parse(body)
