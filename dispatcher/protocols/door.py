"""The one call through which the protocol doors (``/v1/responses``, the MCP server) make a run.

It takes the same path as ``POST /v1/runs``: the caller's scope, then the door
(``Dispatcher.submit`` → ``Door.create_run``: validation, scopes, the tenant's quota and caps,
threads, idempotency). Every protocol request that
creates a run goes through ``create_run`` and nothing else.
"""

from __future__ import annotations

import asyncio

from reactq.dispatcher.client import Dispatcher, RunHandle
from reactq.shared.errors import Forbidden, RequestError
from reactq.shared.requests import RunRequest
from reactq.shared.stores.keys import Caller

__all__ = ["ScopeMissing", "create_run"]


class ScopeMissing(RequestError):
    """The caller's key lacks the scope the act needs (HTTP 403 naming it)."""

    def __init__(self, scope: str) -> None:
        super().__init__(f"this API key lacks the scope {scope!r}", field="scope")
        self.scope = scope


async def create_run(d: Dispatcher, req: RunRequest, caller: Caller) -> RunHandle:
    """Admit and enqueue ``req`` as a run of the caller's tenant (the path ``POST /v1/runs``
    takes). Raises the door's refusals: ``ScopeMissing``, ``RequestError`` naming a field,
    ``TooManyRequests``, ``ThreadBusy``."""
    if not caller.may("runs:write"):
        raise ScopeMissing("runs:write")
    try:
        return await asyncio.to_thread(d.submit, req, tenant=caller.tenant, caller=caller)
    except Forbidden as exc:
        raise ScopeMissing(exc.scope) from exc
