"""Cancel that does not wait for the LLM: run a step's coroutine next to a watcher of the
run's cancel flag, and cancel the step's asyncio task as soon as the flag is up.

Without it a cancel took effect at the next step boundary, i.e. after the LLM call in flight
returned (27 s for a 30 s call). Cancelling the task aborts the HTTP request of the call
(httpx closes the connection); the shell then ends the run ``cancelled`` from the state as it
was when the step began its call — the same path as an LLM failure (``ending.fail``), so the
history stays valid: no assistant message was appended for the aborted call.

The flag is polled (``POLL`` s) with the worker's sync Redis client in a thread: one HGET per
call in flight and poll, no extra connection per loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from reactq.shared.errors import ReactqError

T = TypeVar("T")

#: Seconds between two looks at the cancel flag (cancel takes effect within about this).
POLL = 0.25


class RunCancelled(ReactqError):
    """The run's cancel flag went up while a step was waiting; the step was aborted."""


async def until_cancelled(coro: Coroutine[Any, Any, T], cancelled: Callable[[], bool],
                          poll: float = POLL) -> T:
    """Await ``coro``; raise ``RunCancelled`` (after cancelling it) once ``cancelled()``."""
    task: asyncio.Task[T] = asyncio.ensure_future(coro)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=poll)
            if done:
                return task.result()
            if await asyncio.to_thread(cancelled):
                task.cancel()
                await asyncio.wait({task})
                if not task.cancelled() and task.exception() is None:
                    return task.result()  # it finished in the same instant: keep the result
                raise RunCancelled("the run was cancelled while the step was waiting")
    finally:
        if not task.done():
            task.cancel()
