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

Each name is imported when first used: a process that imports only a part (a worker, the
``reactq`` command, a tool runner) does not pay for the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from reactq.shared.evals.scoring import Score, evaluator
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
    # evals: custom evaluators
    "evaluator", "Score",
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

#: Where each exported name lives (imported on first use, then kept in this module).
_HOME: dict[str, str] = {
    "APIConnectionError": "reactq.dispatcher.api_client",
    "APIError": "reactq.dispatcher.api_client",
    "APITimeoutError": "reactq.dispatcher.api_client",
    "AsyncClient": "reactq.dispatcher.api_client",
    "BadRequest": "reactq.dispatcher.api_client",
    "Client": "reactq.dispatcher.api_client",
    "Conflict": "reactq.dispatcher.api_client",
    "Forbidden": "reactq.dispatcher.api_client",
    "InvalidRequest": "reactq.dispatcher.api_client",
    "NotFound": "reactq.dispatcher.api_client",
    "RateLimited": "reactq.dispatcher.api_client",
    "ServerError": "reactq.dispatcher.api_client",
    "Unauthorized": "reactq.dispatcher.api_client",
    "Dispatcher": "reactq.dispatcher.client",
    "RunHandle": "reactq.dispatcher.client",
    "DagDispatcher": "reactq.dispatcher.dag",
    "DagHandle": "reactq.dispatcher.dag",
    "ConfigError": "reactq.shared.errors",
    "LLMError": "reactq.shared.errors",
    "NoWorker": "reactq.shared.errors",
    "ReactqError": "reactq.shared.errors",
    "RequestError": "reactq.shared.errors",
    "RunNotFound": "reactq.shared.errors",
    "StateConflict": "reactq.shared.errors",
    "StreamIncomplete": "reactq.shared.errors",
    "StructuredOutputError": "reactq.shared.errors",
    "ToolError": "reactq.shared.errors",
    "ToolNotFound": "reactq.shared.errors",
    "hook": "reactq.shared.hooks.decorator",
    "evaluator": "reactq.shared.evals.scoring",
    "Score": "reactq.shared.evals.scoring",
    "Hook": "reactq.shared.hooks",
    "HookContext": "reactq.shared.hooks",
    "HookPoint": "reactq.shared.hooks",
    "HookRegistry": "reactq.shared.hooks",
    "HookResult": "reactq.shared.hooks",
    "run_local": "reactq.shared.inprocess",
    "DagRequest": "reactq.shared.requests",
    "RunRequest": "reactq.shared.requests",
    "Artifact": "reactq.shared.models",
    "ToolResult": "reactq.shared.models",
    "Tool": "reactq.shared.tools.base",
    "ToolRegistry": "reactq.shared.tools.base",
    "tool": "reactq.shared.tools.base",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'reactq' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
