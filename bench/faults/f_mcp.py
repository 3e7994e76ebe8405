"""MCP server faults, in one process (no workers): a stdio server killed mid-call, and the
streamable HTTP server down then back.

Figures: seconds from the kill to the call's error (the dead session is noticed, not waited
out), seconds of the next call (a new session: process start + handshake), and the same for
HTTP.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run() -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from reactq.shared.errors import ToolError
    from reactq.shared.tools.mcp import close_hub, load_mcp_config, mcp_tools
    from tests.mcp.servers import HttpMcpServer, write_config

    tmp = Path(tempfile.mkdtemp(prefix="reactq-f-mcp-"))
    http = HttpMcpServer(tmp / "http.log").start()
    try:
        tools = {t.name: t for t in mcp_tools(load_mcp_config(
            write_config(tmp / "mcp.toml", http_url=http.url, time_server=False)))}
        pid_file = tmp / "pid"

        async def killed() -> tuple[float, str]:
            call = asyncio.ensure_future(tools["demo__slow"].invoke({"seconds": 30, "pid_file": str(pid_file)}))
            while not pid_file.exists():
                await asyncio.sleep(0.01)
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
            t0 = time.perf_counter()
            try:
                await call
                return time.perf_counter() - t0, "no error"
            except ToolError as exc:
                return time.perf_counter() - t0, str(exc)[:80]

        kill_to_error, message = asyncio.run(killed())
        t0 = time.perf_counter()
        recovered = asyncio.run(tools["demo__add"].invoke({"a": 1, "b": 2})) == "3"
        stdio_recovery = time.perf_counter() - t0
        http.kill()
        t0 = time.perf_counter()
        try:
            asyncio.run(tools["web__add"].invoke({"a": 1, "b": 2}))
            http_error = "no error"
        except ToolError as exc:
            http_error = str(exc)[:80]
        http_down_error_s = time.perf_counter() - t0
        http.start()
        t0 = time.perf_counter()
        http_recovered = asyncio.run(tools["web__add"].invoke({"a": 1, "b": 2})) == "3"
        return {"stdio_kill_to_error_s": round(kill_to_error, 3), "stdio_error": message,
                "stdio_next_call_s": round(stdio_recovery, 3), "stdio_recovered": recovered,
                "http_down_error_s": round(http_down_error_s, 3), "http_error": http_error,
                "http_next_call_s": round(time.perf_counter() - t0, 3),
                "http_recovered": http_recovered}
    finally:
        close_hub()
        http.kill()
