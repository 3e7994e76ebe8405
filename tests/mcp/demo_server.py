"""A small MCP server for the tests, written with the ``mcp`` package (``MCPServer``).

``python tests/mcp/demo_server.py stdio`` or ``python tests/mcp/demo_server.py http PORT``.
Tools: ``add`` (read-only), ``slow`` (sleeps; writes the server's pid first, so a test can
kill the server mid-call), ``append_line`` (destructive: appends to a file, so a test counts
how often it ran), ``whoami`` (the server's pid), ``picture`` (an image), ``readme`` (an
embedded resource), ``fail`` (an error result) and ``hub_00`` … ``hub_19`` (a hub of many
tools for tool selection).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import EmbeddedResource, ImageContent, TextResourceContents, ToolAnnotations

server = MCPServer("reactq-test")
READ_ONLY = ToolAnnotations(read_only_hint=True)
HUB_TOPICS = ["weather", "stocks", "news", "sports", "flights", "hotels", "recipes", "movies",
              "music", "books", "podcasts", "maps", "translate", "currency", "crypto",
              "jobs", "events", "traffic", "tides", "pollen"]


@server.tool(annotations=READ_ONLY)
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool(annotations=READ_ONLY)
def whoami() -> str:
    """The process id of this server."""
    return str(os.getpid())


@server.tool(annotations=READ_ONLY)
async def slow(seconds: float, pid_file: str = "") -> str:
    """Sleep ``seconds``, then say so."""
    if pid_file:
        Path(pid_file).write_text(str(os.getpid()))
    await asyncio.sleep(seconds)
    return f"slept {seconds} in pid {os.getpid()}"


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
async def append_line(path: str, line: str, seconds: float = 0.0) -> str:
    """Append ``line`` to the file at ``path`` (then wait ``seconds``)."""
    with open(path, "a") as f:
        f.write(line + "\n")
    await asyncio.sleep(seconds)
    return "appended"


@server.tool(annotations=READ_ONLY)
def picture() -> list[object]:
    """A tiny image and a caption."""
    return ["a red dot", ImageContent(type="image", data="iVBORw0KGgo=", mime_type="image/png")]


@server.tool(annotations=READ_ONLY)
def readme() -> list[object]:
    """An embedded text resource."""
    res = TextResourceContents(uri="file:///docs/readme.txt", mime_type="text/plain", text="hello " * 50)
    return [EmbeddedResource(type="resource", resource=res)]


@server.tool()
def fail(reason: str) -> str:
    """Always fails with ``reason``."""
    raise ValueError(reason)


def _hub_tool(topic: str, i: int) -> None:
    async def fn(query: str) -> str:
        return f"{topic}: no results for {query!r}"

    fn.__name__ = f"hub_{i:02d}"
    fn.__doc__ = f"Look up {topic} information for a query."
    server.tool(name=f"hub_{i:02d}", annotations=READ_ONLY)(fn)


for _i, _topic in enumerate(HUB_TOPICS):
    _hub_tool(_topic, _i)


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
