"""The MCP server at ``/mcp`` on the gateway (streamable HTTP; bearer keys as every route).

Stateless: each request stands alone (no ``Mcp-Session-Id`` bound to one replica), so any
gateway replica answers any call or task; the task state is the run's, in Redis. A plain
call's progress notifications stream on the call's own SSE answer.

The ``mcp`` package is loaded in the background once the gateway serves (a thread imports it:
the gateway answers at once, and ``/mcp`` requests that come first wait for it), not when the
app is built: building the gateway loads no MCP code.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.routing import Route

from reactq.dispatcher.http.gateway import Gateway
from reactq.dispatcher.http.middleware import Receive, Scope, Send, send_json
from reactq.dispatcher.protocols.runview import RunView
from reactq.shared.api.errors import error_body

__all__ = ["PATH", "McpEndpoint", "install"]

log = logging.getLogger("reactq.http")
PATH = "/mcp"
#: Seconds an ``/mcp`` request that came before the server was ready waits for it.
READY_WAIT_S = 60.0


class McpEndpoint:
    """The ASGI endpoint of ``/mcp``: the MCP server's streamable HTTP handler once serving."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.handler: Any = None
        self._ready: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Run the MCP server beside the gateway for its lifetime (started in the background)."""
        self._ready, self._stop = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(self._serve(self._ready, self._stop))
        try:
            yield
        finally:
            self._stop.set()
            await asyncio.wait([task], timeout=5)

    async def _serve(self, ready: asyncio.Event, stop: asyncio.Event) -> None:
        try:
            await asyncio.to_thread(importlib.import_module, "mcp.server.mcpserver")
            async with self._server():
                ready.set()
                await stop.wait()
        except Exception:
            log.exception("the MCP endpoint could not start")
        finally:
            ready.set()  # waiting requests are answered (503 when it did not start)

    @asynccontextmanager
    async def _server(self) -> AsyncIterator[None]:
        """Build the server and run its session manager."""
        from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
        from mcp.server.transport_security import TransportSecuritySettings

        from reactq.dispatcher.mcp.server import build_server

        server = build_server(lambda: RunView(self.gw.dispatcher, self.gw.streams))
        # The gateway is an API behind keys, on whatever interface it was told: no Host allowlist.
        # (The Starlette app is not used: only the session manager it sets up, behind this route.)
        server.streamable_http_app(streamable_http_path=PATH, stateless_http=True,
                                   transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
        manager = server.session_manager
        async with manager.run():
            self.handler = StreamableHTTPASGIApp(manager)
            try:
                yield
            finally:
                self.handler = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.handler is None and self._ready is not None:
            try:
                await asyncio.wait_for(self._ready.wait(), READY_WAIT_S)
            except TimeoutError:
                pass
        if self.handler is None:
            await send_json(send, 503, error_body(503, "the MCP endpoint is not serving yet"),
                            [(b"retry-after", b"1")])
            return
        await self.handler(scope, receive, send)


def install(app: FastAPI, gw: Gateway) -> McpEndpoint:
    """Add ``/mcp`` to ``app``; the lifespan enters ``endpoint.serving()``."""
    endpoint = McpEndpoint(gw)
    app.router.routes.append(Route(PATH, endpoint=endpoint, methods=["GET", "POST", "DELETE"]))
    return endpoint
