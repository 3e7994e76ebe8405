"""reactq: ReAct agents as durable, distributed jobs on Celery and Redis.

``import reactq`` is the one import a user needs::

    import reactq

    @reactq.tool("word_count")
    def word_count(text: str) -> int:
        return len(text.split())

    client = reactq.Client("http://gateway:8000")       # the HTTP API (reactq.AsyncClient: asyncio)
    dispatcher = reactq.Dispatcher()                     # in the cluster: Redis and the broker

The repository's folders ``shared/``, ``workers/`` and ``dispatcher/`` are installed as the
subpackages ``reactq.shared``, ``reactq.workers`` and ``reactq.dispatcher`` (see ``setup.py``),
so installing reactq puts no generic top-level name on anyone's ``sys.path``.
"""

from __future__ import annotations

from reactq.dispatcher.api_client import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    AsyncClient,
    BadRequest,
    Client,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    RateLimited,
    ServerError,
    Unauthorized,
)
from reactq.dispatcher.client import Dispatcher, RunHandle
from reactq.dispatcher.dag import DagDispatcher, DagHandle
from reactq.shared.errors import (
    ConfigError,
    LLMError,
    NoWorker,
    ReactqError,
    RequestError,
    RunNotFound,
    StateConflict,
    StreamIncomplete,
    StructuredOutputError,
    ToolError,
    ToolNotFound,
)
from reactq.shared.hooks.decorator import hook
from reactq.shared.hooks import Hook, HookContext, HookPoint, HookRegistry, HookResult
from reactq.shared.inprocess import run_local
from reactq.shared.requests import DagRequest, RunRequest
from reactq.shared.models import Artifact, ToolResult
from reactq.shared.tools.base import Tool, ToolRegistry, tool

__all__ = [
    # tools and hooks: what a plugin author writes
    "tool", "Tool", "ToolRegistry", "ToolResult", "Artifact",
    "hook", "Hook", "HookContext", "HookPoint", "HookRegistry", "HookResult",
    # running agents: in the cluster (Redis) and over HTTP
    "RunRequest", "DagRequest", "Dispatcher", "RunHandle", "DagDispatcher", "DagHandle", "run_local",
    "Client", "AsyncClient",
    # errors: one root
    "ReactqError", "ConfigError", "RequestError", "LLMError", "StreamIncomplete",
    "StructuredOutputError", "ToolError", "ToolNotFound", "RunNotFound", "StateConflict", "NoWorker",
    # errors of the HTTP client: one per kind of error answer
    "APIError", "BadRequest", "Unauthorized", "Forbidden", "NotFound", "Conflict", "InvalidRequest",
    "RateLimited", "ServerError", "APIConnectionError", "APITimeoutError",
]
