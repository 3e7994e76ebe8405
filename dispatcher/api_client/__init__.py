"""``reactq.Client`` and ``reactq.AsyncClient``: the HTTP API from Python, for a service that
reaches the gateway and nothing else (``reactq.Dispatcher`` is the in-cluster client: it
talks to Redis and the broker directly).

Rooms: ``sync`` (Client), ``aio`` (AsyncClient), ``routes`` (every operation as a ``Call``,
shared by both), ``models`` (the answers), ``errors`` (one type per kind of error answer),
``_core`` (retry rule, backoff, the SSE decoder), ``_http`` (httpx2 details).
"""

from __future__ import annotations

from reactq.dispatcher.api_client.aio import AsyncClient
from reactq.dispatcher.api_client.errors import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    BadRequest,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    RateLimited,
    ServerError,
    Unauthorized,
)
from reactq.dispatcher.api_client.models import (
    ApiKey,
    Approval,
    Batch,
    Dag,
    Interrupt,
    Run,
    RunList,
    RunRow,
    Schedule,
    StreamEvent,
    Thread,
)
from reactq.dispatcher.api_client.sync import Client

__all__ = [
    "Client", "AsyncClient",
    "Run", "RunList", "RunRow", "StreamEvent", "Interrupt", "Dag", "Batch", "Thread", "Approval", "Schedule",
    "ApiKey",
    "APIError", "BadRequest", "Unauthorized", "Forbidden", "NotFound", "Conflict", "InvalidRequest",
    "RateLimited", "ServerError", "APIConnectionError", "APITimeoutError",
]
