"""``http_fetch`` against real HTTP servers on loopback: the allowlist lets a test reach them;
without it every spelling of a loopback address is refused before any connection (the
servers' access logs stay empty), on the first URL and on every redirect."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from reactq.shared.errors import ToolError
from reactq.shared.settings import Settings
from reactq.shared.tools.base import ToolArgumentsError
from reactq.shared.tools.http_fetch import html_to_text, http_fetch_tool
from reactq.shared.tools.loader import default_registry
from reactq.shared.tools.netguard import FetchRefused

pytestmark = pytest.mark.integration

PAGE = b"""<!doctype html><html><head><title>Tide tables</title>
<style>body { color: red }</style><script>var secret = "do not show";</script></head>
<body><h1>Brest</h1><p>High tide at <b>06:12</b>, low tide at 12:30.</p>
<ul><li>Spring&nbsp;tides</li><li>Neap tides</li></ul></body></html>"""


class Server:
    """A loopback HTTP server that records every request it receives."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.redirect_to = ""
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, ctype: str, body: bytes, **headers: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_GET(self) -> None:
                outer.log.append(f"{self.command} {self.path}")
                if self.path == "/page":
                    self._send(200, "text/html; charset=utf-8", PAGE)
                elif self.path == "/big":
                    self._send(200, "text/plain", b"x" * 300_000)
                elif self.path == "/bin":
                    self._send(200, "image/png", b"\x89PNG" + b"\0" * 100)
                elif self.path == "/slow":
                    time.sleep(3)
                    self._send(200, "text/plain", b"late")
                elif self.path == "/hop":
                    self._send(302, "text/plain", b"", Location="/page")
                elif self.path == "/away":
                    self._send(302, "text/plain", b"", Location=outer.redirect_to)
                else:
                    self._send(404, "text/plain", b"no such page")

            do_HEAD = do_GET

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, path: str = "/page", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.httpd.shutdown()


@pytest.fixture
def other() -> Iterator[Server]:
    s = Server()
    yield s
    s.httpd.shutdown()


def fetch(tool, url: str, method: str = "GET") -> str:
    return asyncio.run(tool.invoke({"url": url, "method": method}))


def test_allowed_host_port_gets_readable_text(server):
    tool = http_fetch_tool(allow=f"127.0.0.1:{server.port}")
    out = fetch(tool, server.url("/page"))
    assert out.startswith("HTTP 200 OK · text/html")
    assert "# Tide tables" in out and "Brest\nHigh tide at 06:12, low tide at 12:30." in out
    assert "Spring\xa0tides\nNeap tides" in out
    assert "secret" not in out and "color" not in out
    head = fetch(tool, server.url("/page"), "HEAD")
    assert head.startswith("HTTP 200 OK") and "06:12" not in head
    assert server.log == ["GET /page", "HEAD /page"]


def test_limits_size_time_binary_and_status(server):
    tool = http_fetch_tool(allow=f"127.0.0.1:{server.port}", max_bytes=10_000, timeout=1.5)
    big = fetch(tool, server.url("/big"))
    assert "[truncated: only the first 10000 bytes were read]" in big and big.split("\n\n", 1)[1].count("x") == 10_000
    assert "[binary content: 104 bytes, not shown]" in fetch(tool, server.url("/bin"))
    assert fetch(tool, server.url("/nope")).startswith("HTTP 404 Not Found")
    with pytest.raises(ToolError, match="within 1.5 s"):
        fetch(tool, server.url("/slow"))


def test_same_host_redirect_is_followed(server):
    tool = http_fetch_tool(allow=f"127.0.0.1:{server.port}")
    assert "06:12" in fetch(tool, server.url("/hop"))
    assert server.log == ["GET /hop", "GET /page"]


@pytest.mark.parametrize("host", [
    "127.0.0.1", "localhost", "2130706433", "0x7f000001", "017700000001", "0177.0.0.1",
    "127.1", "127.0.0.2", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::1]", "0.0.0.0", "0",
    "localhost.",
])
def test_every_loopback_spelling_is_refused_without_a_connection(server, host):
    tool = http_fetch_tool(allow="")
    with pytest.raises(FetchRefused, match="refused"):
        fetch(tool, server.url("/page", host=host))
    assert server.log == [], "no request reached the server"


@pytest.mark.parametrize("url, why", [
    ("http://169.254.169.254/latest/meta-data/", "metadata"),
    ("http://[fd00:ec2::254]/", "metadata"),
    ("http://10.0.0.1/", "private"),
    ("http://192.168.1.1/", "private"),
    ("http://172.16.0.1/", "private"),
    ("http://100.64.0.1/", "CGNAT"),
    ("http://224.0.0.1/", "multicast"),
    ("http://169.254.1.1/", "link-local"),
    ("http://[fe80::1]/", "link-local"),
    ("file:///etc/passwd", "not an http"),
    ("ftp://example.org/", "not an http"),
])
def test_internal_addresses_and_other_schemes_are_refused(url, why):
    with pytest.raises(FetchRefused, match=why):
        fetch(http_fetch_tool(allow=""), url)


@pytest.mark.parametrize("target", ["localhost", "127.0.0.1", "2130706433", "[::ffff:127.0.0.1]"])
def test_a_redirect_to_an_internal_address_is_refused_at_the_hop(server, other, target):
    server.redirect_to = other.url("/page", host=target)
    tool = http_fetch_tool(allow=f"127.0.0.1:{server.port}")  # only the first server
    with pytest.raises(FetchRefused, match="refused"):
        fetch(tool, server.url("/away"))
    assert server.log == ["GET /away"]
    assert other.log == [], "the redirect target was never contacted"


def test_allowlist_by_host_name_and_by_cidr(server):
    assert "06:12" in fetch(http_fetch_tool(allow="localhost"), server.url("/page", host="localhost"))
    assert "06:12" in fetch(http_fetch_tool(allow="127.0.0.0/8"), server.url("/page", host="127.0.0.1"))
    with pytest.raises(FetchRefused):
        fetch(http_fetch_tool(allow="127.0.0.1:1"), server.url("/page"))  # other port
    assert len(server.log) == 2


def test_only_get_and_head_are_offered():
    tool = http_fetch_tool()
    assert tool.idempotent is True
    assert tool.parameters()["properties"]["method"]["enum"] == ["GET", "HEAD"]
    with pytest.raises(ToolArgumentsError, match="method"):
        asyncio.run(tool.invoke({"url": "http://example.org/", "method": "POST"}))


def test_the_registry_configures_it_from_settings_and_refuses_a_bad_allowlist():
    from reactq.shared.errors import ConfigError

    assert "http_fetch" in default_registry(Settings(http_fetch_allow="intranet, 10.0.0.0/8"))
    with pytest.raises(ConfigError, match="'10.0.0.0/99' is not a CIDR"):
        default_registry(Settings(http_fetch_allow="10.0.0.0/99"))


def test_html_to_text_keeps_blocks_and_drops_scripts():
    assert html_to_text("<p>a</p><script>x()</script><p>b &amp; c</p>") == "a\nb & c"
