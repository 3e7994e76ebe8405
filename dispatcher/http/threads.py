"""HTTP routes for threads (DESIGN "Threads and double texting"), included by the gateway.

* ``GET /v1/threads/{thread_id}`` → ``{thread_id, active_run, runs: [{run_id, status, query,
  created_at}], messages: [{role, content}]}``, runs oldest first; ``messages`` is the
  conversation the thread's next run starts from. 404 for a thread never used or expired.

``POST /v1/runs`` with a ``thread_id`` answers through ``submit_reply``: a created or
enqueued run → the usual 202; ``inject`` → 202 ``{run_id: <the active run>, injected: true,
interrupt_id}``; ``reject`` → 409 naming the active run.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from reactq.dispatcher.client import RunHandle
from reactq.dispatcher.threads import ThreadBusy, thread_view
from reactq.shared.requests import THREAD_ID_PATTERN

router = APIRouter(tags=["threads"])
_THREAD_ID = re.compile(THREAD_ID_PATTERN)


@router.get("/v1/threads/{thread_id}")
def get_thread(thread_id: str, request: Request) -> Any:
    """The thread's runs (oldest first), its active run and its conversation so far."""
    if len(thread_id) > 200 or not _THREAD_ID.match(thread_id):
        return JSONResponse({"detail": [{"type": "value_error", "loc": ["path", "thread_id"],
                                         "msg": "thread_id: 1..200 characters of A-Z a-z 0-9 . _ : -"}]},
                            status_code=422)
    view = thread_view(request.app.state.gateway.dispatcher, thread_id)
    if view is None:
        return JSONResponse({"detail": f"no thread with id {thread_id!r} (it may have expired)"},
                            status_code=404)
    return view


def busy_reply(exc: ThreadBusy) -> JSONResponse:
    """409 for ``multitask_strategy: reject`` while the thread has an active run."""
    return JSONResponse({"detail": str(exc), "thread_id": exc.thread_id, "active_run": exc.active_run},
                        status_code=409)


def submit_reply(handle: RunHandle) -> JSONResponse | None:
    """The ``inject`` answer (202, the active run took the query), else None (the usual 202)."""
    if not handle.injected:
        return None
    base = f"/v1/runs/{handle.run_id}"
    return JSONResponse({"run_id": handle.run_id, "injected": True, "interrupt_id": handle.interrupt_id,
                         "events_url": f"{base}/events", "status_url": base, "created": False},
                        status_code=202)
