"""One MCP client session per server per process, on a dedicated event-loop thread.

Why a thread of its own: an MCP session is asyncio (anyio) state bound to the loop that
opened it, while a Celery worker runs tasks on several threads, each with its own loop
(``reactq.workers.runtime``). Every session of the process therefore lives on one loop,
in a daemon thread started on first use; callers on any thread submit coroutines to it
(``run_coroutine_threadsafe``) and await the result on their own loop.

Each server's session is opened lazily by the first call, held by a task of the hub loop
(anyio requires a context to be exited by the task that entered it), and reopened by the
next call after it broke: a call that fails with anything but an MCP protocol error (the
server process died, the HTTP connection was refused, a call timed out) closes the session,
so the following call starts a fresh one. ``close()`` (worker shutdown, ``atexit``) ends
every session and stops the stdio server processes. A fork (Celery's prefork pool) gets a
new hub: :func:`get_hub` keys the hub by process id.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import sys
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import CallToolResult, Tool as McpToolDef

from reactq.shared.tools.mcp.config import McpServerConfig

__all__ = ["McpHub", "McpUnavailable", "get_hub", "close_hub"]

log = logging.getLogger(__name__)
T = TypeVar("T")
# JSON-RPC codes the SDK raises itself when the transport broke (mcp_types.jsonrpc): the
# session is gone, unlike a server's own error answer.
_TRANSPORT_CODES = {-32000, -32001}  # CONNECTION_CLOSED, REQUEST_TIMEOUT


def _server_answered(exc: BaseException) -> bool:
    return isinstance(exc, MCPError) and exc.code not in _TRANSPORT_CODES


class McpUnavailable(Exception):
    """The server could not be reached, or its session broke during the call."""


class _Connection:
    """The session with one server, owned by a task on the hub loop."""

    def __init__(self, cfg: McpServerConfig) -> None:
        self.cfg = cfg
        self.client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock = asyncio.Lock()
        self.starts = 0

    def _transport(self) -> Any:
        cfg = self.cfg
        if cfg.command:
            params = StdioServerParameters(command=cfg.command, args=list(cfg.args),
                                           env=dict(cfg.env) or None, cwd=cfg.cwd)
            # The server's stderr goes to this process's own (a worker's log): Celery replaces
            # sys.stderr with a logging proxy that has no file descriptor to hand on.
            return stdio_client(params, errlog=sys.__stderr__ or sys.stderr)
        assert cfg.url is not None
        http = create_mcp_http_client(headers=cfg.resolved_headers())
        return streamable_http_client(cfg.url, http_client=http)

    async def session(self) -> Client:
        """The live session, opened now if there is none."""
        async with self._lock:
            if self.client is not None and self._task is not None and not self._task.done():
                return self.client
            loop = asyncio.get_running_loop()
            ready: asyncio.Future[Client] = loop.create_future()
            self._stop = asyncio.Event()
            self._task = loop.create_task(self._hold(ready, self._stop),
                                          name=f"mcp:{self.cfg.name}")
            self.starts += 1
            try:
                return await asyncio.wait_for(asyncio.shield(ready), self.cfg.connect_timeout)
            except BaseException:
                await self.close()
                raise

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        try:
            async with Client(self._transport()) as client:
                self.client = client
                ready.set_result(client)
                await stop.wait()
        except BaseException as exc:  # the task must end quietly: callers see it via ``ready``
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else McpUnavailable(str(exc)))
            else:
                log.info("MCP server '%s': session ended: %s", self.cfg.name, exc)
        finally:
            self.client = None

    async def close(self) -> None:
        task, self._task, self.client = self._task, None, None
        if self._stop is not None:
            self._stop.set()
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(task, 5)
            except (asyncio.TimeoutError, Exception):
                task.cancel()


class McpHub:
    """Sessions with the configured servers, for every thread of this process."""

    def __init__(self, servers: list[McpServerConfig]) -> None:
        self.pid = os.getpid()
        self.servers = {s.name: s for s in servers}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="reactq-mcp",
                                        daemon=True)
        self._thread.start()
        self._conns = {name: _Connection(cfg) for name, cfg in self.servers.items()}
        self._closed = False

    # -- submitting work to the hub loop -------------------------------------------------
    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self._closed:
            coro.close()
            raise McpUnavailable("the MCP hub is closed (worker shutting down)")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run_sync(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        return self.submit(coro).result(timeout)

    async def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the hub loop from any other loop; cancelling cancels it there."""
        return await asyncio.wrap_future(self.submit(coro))

    # -- operations (these run on the hub loop) ------------------------------------------
    async def list_tools(self, server: str) -> list[McpToolDef]:
        conn = self._conns[server]
        tools: list[McpToolDef] = []
        cursor: str | None = None
        while True:
            client = await self._session(conn)
            try:
                page = await asyncio.wait_for(client.list_tools(cursor=cursor), conn.cfg.timeout)
            except Exception as exc:
                if _server_answered(exc):
                    raise
                await conn.close()
                raise McpUnavailable(_describe(conn.cfg, exc)) from exc
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools

    async def call_tool(self, server: str, tool: str, args: dict[str, Any]) -> CallToolResult:
        conn = self._conns[server]
        client = await self._session(conn)
        try:
            call = client.call_tool(tool, args)
            return await asyncio.wait_for(self._unless_dies(conn, call), conn.cfg.timeout)
        except Exception as exc:
            if _server_answered(exc):
                raise  # the server answered with a protocol error: the session is fine
            await conn.close()  # the next call opens a new session
            raise McpUnavailable(_describe(conn.cfg, exc)) from exc

    async def _unless_dies(self, conn: _Connection, call: Coroutine[Any, Any, T]) -> T:
        """``call``, or an error as soon as the session's task ends (the server died)."""
        held = conn._task
        work = asyncio.ensure_future(call)
        if held is None:
            return await work
        done, _ = await asyncio.wait({work, held}, return_when=asyncio.FIRST_COMPLETED)
        if work in done:
            return work.result()
        work.cancel()
        raise McpUnavailable("the session ended during the call")

    async def _session(self, conn: _Connection) -> Client:
        try:
            return await conn.session()
        except Exception as exc:
            raise McpUnavailable(_describe(conn.cfg, exc)) from exc

    def starts(self, server: str) -> int:
        """How many sessions this process opened with ``server`` (1 + restarts)."""
        return self._conns[server].starts

    # -- shutdown -----------------------------------------------------------------------
    def close(self) -> None:
        if self._closed or os.getpid() != self.pid:
            return
        self._closed = True

        async def close_all() -> None:
            await asyncio.gather(*(c.close() for c in self._conns.values()),
                                 return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(close_all(), self._loop).result(10)
        except Exception:
            log.warning("closing MCP sessions took too long", exc_info=True)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


def _describe(cfg: McpServerConfig, exc: BaseException) -> str:
    reason = str(exc) or type(exc).__name__
    if isinstance(exc, asyncio.TimeoutError):
        reason = f"no answer within {cfg.timeout:g} s"
    if isinstance(exc, BaseExceptionGroup):
        reason = "; ".join(str(e) or type(e).__name__ for e in exc.exceptions)
    return f"MCP server '{cfg.name}' is unavailable: {reason}"


_hub: McpHub | None = None
_hub_lock = threading.Lock()


def get_hub(servers: list[McpServerConfig]) -> McpHub:
    """This process's hub (a new one after a fork, or when the server list changed)."""
    global _hub
    with _hub_lock:
        if _hub is None or _hub.pid != os.getpid() or _hub.servers != {s.name: s for s in servers}:
            if _hub is not None and _hub.pid == os.getpid():
                _hub.close()
            _hub = McpHub(servers)
        return _hub


def close_hub() -> None:
    """Close this process's sessions (worker shutdown); the next use opens new ones."""
    global _hub
    with _hub_lock:
        hub, _hub = _hub, None
    if hub is not None:
        hub.close()


atexit.register(close_hub)
