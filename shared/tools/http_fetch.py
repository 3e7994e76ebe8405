"""The ``http_fetch`` built-in: GET or HEAD a URL, with limits and an SSRF guard.

* Only ``http``/``https``, only GET and HEAD (nothing that changes state is offered), so
  the tool is idempotent.
* Limits: ``REACTQ_HTTP_FETCH_TIMEOUT`` seconds for the whole fetch (redirects included),
  ``REACTQ_HTTP_FETCH_MAX_BYTES`` read from the body (the rest is dropped and the
  observation says so), at most 5 redirects.
* HTML becomes readable text (scripts, styles and markup dropped, block elements on their
  own lines); other ``text/*``, JSON and XML are returned as text; binary bodies are
  summarised (type and size), never pasted.
* Every connection, redirects included, goes through :class:`~reactq.shared.tools.netguard.GuardedBackend`:
  the address is checked after DNS resolution and the socket opened to that address.
  Environment proxies are ignored (a proxy would connect on the tool's behalf, unchecked).
"""

from __future__ import annotations

import asyncio
import re
from html.parser import HTMLParser
from typing import Literal

import httpx2
from pydantic import BaseModel, Field

from reactq.shared.errors import ToolError
from reactq.shared.tools.base import Tool
from reactq.shared.tools.netguard import Allowlist, FetchRefused, guarded_transport

__all__ = ["html_to_text", "http_fetch_tool"]

MAX_REDIRECTS = 5
_SKIP = {"script", "style", "noscript", "template", "svg", "head"}
_BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section",
          "article", "header", "footer", "pre", "blockquote", "table", "ul", "ol", "title", "hr"}


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.title = ""
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        if tag in _SKIP:
            self._skip += 1
        elif tag in _BLOCK:
            self.out.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in _SKIP and self._skip:
            self._skip -= 1
        elif tag in _BLOCK:
            self.out.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        if not self._skip:
            self.out.append(data)


def html_to_text(html: str) -> str:
    """Readable text of an HTML page: title first, one line per block, spaces collapsed."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    lines = (re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in "".join(parser.out).split("\n"))
    body = "\n".join(line for line in lines if line)
    title = parser.title.strip()
    return f"# {title}\n{body}" if title and not body.startswith(title) else body


class FetchArgs(BaseModel):
    url: str = Field(description="The http:// or https:// URL to fetch")
    method: Literal["GET", "HEAD"] = Field("GET", description="GET (default) or HEAD")


def http_fetch_tool(*, allow: str = "", max_bytes: int = 2_000_000, timeout: float = 20.0) -> Tool:
    """The ``http_fetch`` tool with these limits and this allowlist (see the module doc)."""
    allowlist = Allowlist.parse(allow)

    async def http_fetch(url: str, method: str = "GET") -> str:
        try:
            return await asyncio.wait_for(_fetch(url, method, allowlist, max_bytes), timeout)
        except asyncio.TimeoutError:
            raise ToolError(f"http_fetch: no complete answer from {url} within {timeout:g} s") from None

    return Tool(name="http_fetch", args_model=FetchArgs, fn=http_fetch, idempotent=True, isolate=False,
                description="Fetch a public web page or file over HTTP(S) (GET or HEAD) and "
                            "return its status and readable text.")


async def _fetch(url: str, method: str, allow: Allowlist, max_bytes: int) -> str:
    async with httpx2.AsyncClient(transport=guarded_transport(allow), trust_env=False, follow_redirects=False,
                                  headers={"User-Agent": "reactq-http-fetch/1"}) as client:
        current = _check_url(url)
        for _ in range(MAX_REDIRECTS + 1):
            try:
                async with client.stream(method, current) as resp:
                    if resp.is_redirect and "location" in resp.headers:
                        current = _check_url(str(resp.url.join(resp.headers["location"])))
                        continue
                    body, truncated = await _read(resp, max_bytes) if method == "GET" else (b"", False)
                    return _render(resp, body, truncated, method)
            except FetchRefused:
                raise
            except httpx2.HTTPError as exc:
                cause = exc.__cause__ or exc.__context__
                if isinstance(cause, FetchRefused):
                    raise FetchRefused(str(cause)) from None
                raise ToolError(f"http_fetch {current}: {type(exc).__name__}: {exc}") from None
        raise ToolError(f"http_fetch {url}: more than {MAX_REDIRECTS} redirects")


def _check_url(url: str) -> str:
    try:
        parsed = httpx2.URL(url)
    except Exception as exc:  # httpx2.InvalidURL and friends
        raise FetchRefused(f"refused: '{url}' is not a valid URL ({exc})") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise FetchRefused(f"refused: '{url}' is not an http(s) URL")
    return str(parsed)


async def _read(resp: httpx2.Response, max_bytes: int) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            return b"".join(chunks)[:max_bytes], True
    return b"".join(chunks), False


def _render(resp: httpx2.Response, body: bytes, truncated: bool, method: str) -> str:
    ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
    head = f"HTTP {resp.status_code} {resp.reason_phrase} · {ctype or 'no content type'} · {resp.url}"
    if method == "HEAD":
        length = resp.headers.get("content-length")
        return head + (f" · {length} bytes" if length else "")
    note = f"\n[truncated: only the first {len(body)} bytes were read]" if truncated else ""
    if not _is_text(ctype):
        return f"{head}\n[binary content: {len(body)} bytes, not shown]{note}"
    text = body.decode(resp.encoding or "utf-8", errors="replace")
    if ctype in ("text/html", "application/xhtml+xml"):
        text = html_to_text(text)
    return f"{head}\n\n{text}{note}"


def _is_text(ctype: str) -> bool:
    return (not ctype or ctype.startswith("text/") or ctype.endswith(("+json", "+xml"))
            or ctype in ("application/json", "application/xml", "application/javascript"))
