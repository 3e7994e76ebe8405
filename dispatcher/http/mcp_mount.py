"""The MCP server at ``/mcp`` on the gateway (streamable HTTP; bearer keys as every route).

Stateless: each request stands alone (no ``Mcp-Session-Id`` bound to one replica), so any
gateway replica answers any call or task; the task state is the run's, in Redis. A plain
call's progress notifications stream on the call's own SSE answer.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from fastapi import FastAPI
from mcp.server.transport_security import TransportSecuritySettings

from reactq.dispatcher.http.gateway import Gateway
from reactq.dispatcher.mcp.server import build_server
from reactq.dispatcher.protocols.runview import RunView

__all__ = ["PATH", "install"]

PATH = "/mcp"


def install(app: FastAPI, gw: Gateway) -> AbstractAsyncContextManager[None]:
    """Add ``/mcp`` to ``app``; the returned context runs its session manager (the lifespan's)."""
    server = build_server(lambda: RunView(gw.dispatcher, gw.streams))
    # The gateway is an API behind keys, on whatever interface it was told: no Host allowlist.
    mcp_app = server.streamable_http_app(streamable_http_path=PATH, stateless_http=True,
                                         transport_security=TransportSecuritySettings(
                                             enable_dns_rebinding_protection=False))
    for route in mcp_app.routes:
        app.router.routes.append(route)
    return server.session_manager.run()
