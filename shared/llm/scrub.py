"""Provider error text made safe to store, publish and log, and bad replies named.

A provider's error message can echo what it was sent (a 401 that quotes the API key). Every
message that leaves ``shared/llm`` goes through ``scrub``: the configured keys, and anything
shaped like a key (``sk-…``) or a bearer token, are replaced before the text reaches a run
result, an ``error`` event, SSE or a log line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from reactq.shared.settings import env_value

_SHAPES = [
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"), "sk-***"),
    (re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=\-]{4,}"), "Bearer ***"),
    (re.compile(r"(?i)(api[_-]?key[\"'=:\s]+)[A-Za-z0-9._\-]{8,}"), r"\1***"),
]
#: Environment variables whose values are secrets wherever they appear.
KEY_VARS = ("OPENAI_API_KEY",)
SNIPPET = 200


def configured_keys(extra: Iterable[str | None] = ()) -> list[str]:
    keys = [env_value(v) for v in KEY_VARS] + list(extra)
    # Longest first, so a key that contains another is replaced whole.
    return sorted({k for k in keys if k and len(k) >= 4}, key=len, reverse=True)


def scrub(text: str, keys: Iterable[str | None] = ()) -> str:
    """``text`` without the configured keys and key-shaped tokens."""
    for key in configured_keys(keys):
        text = text.replace(key, "***")
    for pattern, repl in _SHAPES:
        text = pattern.sub(repl, text)
    return text


def describe_body(body: str, content_type: str | None = None) -> str:
    """What a reply that is not a chat completion looks like, for the error message."""
    head = body.lstrip()[:SNIPPET]
    ctype = (content_type or "").split(";")[0].strip()
    if ctype == "text/html" or head[:15].lower().startswith(("<!doctype html", "<html")):
        title = re.search(r"(?is)<title>(.*?)</title>", body)
        what = f"an HTML page ({title.group(1).strip()[:80]!r})" if title else "an HTML page"
        return f"{what} instead of JSON — a proxy or gateway in front of the model?"
    if head.startswith(("{", "[")):
        return f"truncated or malformed JSON ({len(body)} bytes)"
    return f"{ctype or 'text'} instead of JSON: {head[:80]!r}"
