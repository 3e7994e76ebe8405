"""Starting the test MCP servers: the repo's ``demo_server.py`` (stdio or streamable HTTP)
and the published ``mcp-server-time`` (stdio), and writing a ``REACTQ_MCP`` file for them."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from reactq.shared.redisconn import free_port

HERE = Path(__file__).resolve().parent
DEMO = HERE / "demo_server.py"


class HttpMcpServer:
    """``demo_server.py http PORT`` as a child process; ``kill()`` and ``start()`` again."""

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> HttpMcpServer:
        self.proc = subprocess.Popen([sys.executable, str(DEMO), "http", str(self.port)],
                                     stdout=self.log.open("ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(self.log.read_text()[-2000:]) from None
                time.sleep(0.1)
        raise RuntimeError(f"MCP HTTP server not up:\n{self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def write_config(path: Path, *, http_url: str | None, time_server: bool = True) -> Path:
    lines = ["[servers.demo]", f"command = {str(sys.executable)!r}",
             f"args = [{str(DEMO)!r}, 'stdio']", ""]
    if http_url:
        lines += ["[servers.web]", f"url = {http_url!r}", "timeout = 20", ""]
    if time_server:
        lines += ["[servers.time]", f"command = {str(sys.executable)!r}",
                  "args = ['-m', 'mcp_server_time', '--local-timezone', 'UTC']", ""]
    path.write_text("\n".join(lines))
    return path
