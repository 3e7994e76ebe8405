"""``reactq mcp``: reactq as an MCP server on stdio (for an MCP client's configuration).

The server (``reactq.dispatcher.mcp``) offers the tool ``reactq_run`` and MCP tasks; it reaches
Redis directly, as the other commands do (``REACTQ_REDIS_URL``), and its runs belong to
``--tenant`` (default ``default``). stdout is the protocol's channel: notes go to stderr.
"""

from __future__ import annotations

import contextlib
import sys

import typer


def mcp(tenant: str = typer.Option("default", "--tenant", help="the tenant whose runs this server makes and sees"),
        ) -> None:
    """Serve reactq as an MCP server on stdio: the tool reactq_run, and MCP tasks."""
    from reactq.dispatcher.cli.common import dispatcher, local, settings, with_model
    from reactq.dispatcher.mcp.server import build_server
    from reactq.dispatcher.protocols.runview import RunView
    from reactq.shared.redisconn import async_client
    from reactq.shared.stores.keys import Caller
    from reactq.shared.tenancy import ADMIN

    with contextlib.redirect_stdout(sys.stderr):  # stdout carries the protocol alone
        s = local(with_model(settings()))
        d = dispatcher(s)
    views: list[RunView] = []

    def access() -> RunView:
        if not views:  # made on the serving loop (an async client belongs to one loop)
            views.append(RunView(d, async_client(s)))
        return views[0]

    build_server(access, default_caller=Caller(tenant, frozenset({ADMIN}), key_id="reactq-mcp")).run("stdio")
