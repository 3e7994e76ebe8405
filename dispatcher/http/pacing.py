"""Admission per turn of the event loop: a burst of requests is let into the app a few at a
time, so the loop polls its sockets between batches and ``/healthz`` is never stuck behind a
thousand requests that arrived together.

asyncio runs every callback that is ready before it polls its sockets again. A thousand SSE
clients connecting at once make a thousand requests ready in the same turn: routing, the
Redis reads and the first frames of all of them would run back to back (hundreds of ms on a
busy box) while the probe's request, read in the next poll, waits. ``Paced`` lets at most
``per_turn`` requests past it per turn; the rest wait their turn in arrival order. The
liveness probe is never held. Total throughput is unchanged: the same work, interleaved with
polls.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Requests let into the app per turn of the event loop.
PER_TURN = 16
#: Never held: liveness must answer from the loop at once.
UNPACED = ("/healthz",)


class Pacer:
    """At most ``per_turn`` admissions per turn of the loop; the others wait, in order."""

    def __init__(self, per_turn: int = PER_TURN) -> None:
        self.per_turn = per_turn
        self.admitted = 0
        self.waiters: deque[asyncio.Future[None]] = deque()
        self.turn_scheduled = False

    async def admit(self) -> None:
        if self.admitted < self.per_turn and not self.waiters:
            self.admitted += 1
            self._next_turn()
            return
        fut = asyncio.get_running_loop().create_future()
        self.waiters.append(fut)
        self._next_turn()
        await fut

    def _next_turn(self) -> None:
        if not self.turn_scheduled:
            self.turn_scheduled = True
            asyncio.get_running_loop().call_soon(self._turn)

    def _turn(self) -> None:
        """A new turn: count afresh and let the next waiters in."""
        self.turn_scheduled = False
        self.admitted = 0
        while self.waiters and self.admitted < self.per_turn:
            fut = self.waiters.popleft()
            if not fut.done():  # not cancelled (the client went away while waiting)
                fut.set_result(None)
                self.admitted += 1
        if self.waiters or self.admitted:
            self._next_turn()


_PACERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pacer] = weakref.WeakKeyDictionary()


def loop_pacer() -> Pacer:
    """The pacer of the running loop (a test client may run requests on several loops)."""
    loop = asyncio.get_running_loop()
    pacer = _PACERS.get(loop)
    if pacer is None:
        pacer = _PACERS[loop] = Pacer()
    return pacer


class Paced:
    """ASGI middleware: HTTP requests but the liveness probe pass the loop's ``Pacer``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in UNPACED:
            await loop_pacer().admit()
        await self.app(scope, receive, send)
