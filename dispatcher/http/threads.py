"""HTTP routes for threads, included by the gateway.

* ``GET /v1/threads/{thread_id}`` → ``ThreadView`` (``{thread_id, active_run, runs: [{run_id,
  status, query, created_at}], messages: [{role, content}]}``), runs oldest first; ``messages``
  is the conversation the thread's next run starts from. 404 for a thread never used or expired.

``POST /v1/runs`` with a ``thread_id``: a created or enqueued run → ``RunCreated``; ``inject``
→ 202 ``ThreadInjected`` (``{run_id: <the active run>, injected: true, interrupt_id}``);
``reject`` → 409 naming the active run (``busy_reply``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from reactq.dispatcher.http.auth import Caller, need
from reactq.dispatcher.http.errors import conflict, not_found, responses
from reactq.dispatcher.http.gateway import ThreadIdPath
from reactq.dispatcher.threads import ThreadBusy, thread_view
from reactq.shared.api.ops import ThreadView

router = APIRouter(tags=["threads"])


@router.get("/v1/threads/{thread_id}", response_model=ThreadView, responses=responses(404))
def get_thread(thread_id: ThreadIdPath, request: Request, caller: Annotated[Caller, need("runs:read")],
               tenant: str | None = Query(None, max_length=63,
                                          description="an admin key: whose thread (default: its own tenant's)")) -> Any:
    """The caller's tenant's thread: its runs (oldest first), active run and conversation."""
    owner = tenant if tenant is not None and caller.admin else caller.tenant
    view = thread_view(request.app.state.gateway.dispatcher, thread_id, owner)
    if view is None:
        return not_found(f"no thread with id {thread_id!r} (it may have expired)")
    return view


def busy_reply(exc: ThreadBusy) -> JSONResponse:
    """409 for ``multitask_strategy: reject`` while the thread has an active run (its
    ``details`` name the thread and the active run)."""
    return conflict(str(exc), thread_id=exc.thread_id, active_run=exc.active_run)
