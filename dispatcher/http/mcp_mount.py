"""The MCP server at ``/mcp`` on the gateway (streamable HTTP; bearer keys as every route).

Stateless: each request stands alone (no ``Mcp-Session-Id`` bound to one replica), so any
gateway replica answers any call or task; the task state is the run's, in Redis. A plain
call's progress notifications stream on the call's own SSE answer.

The ``mcp`` package is loaded when the gateway starts serving (its lifespan), not when the app
is built: building the gateway loads no MCP code.
"""

from __future__ import annotations

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

PATH = "/mcp"


class McpEndpoint:
    """The ASGI endpoint of ``/mcp``: the MCP server's streamable HTTP handler once serving."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.handler: Any = None

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Build the server and run its session manager for the gateway's lifetime."""
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
