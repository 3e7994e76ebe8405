"""Errors: an ``openai`` exception or a bad reply as an ``LLMError`` that names the model and
the HTTP status, with every secret scrubbed from it and from the exception it wraps."""

from __future__ import annotations

from collections.abc import Callable
import openai

from reactq.shared.errors import LLMError
from reactq.shared.llm.scrub import describe_body


def retry_after(exc: BaseException) -> float | None:
    """Seconds from a ``Retry-After`` / ``retry-after-ms`` header of an HTTP error, if any."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            return max(0.0, float(raw) * scale)
        except ValueError:
            continue  # an HTTP date: rare from LLM providers; treated as absent
    return None


def wrap(exc: BaseException, who: str, *, timeout: float, scrub: Callable[[str], str]) -> LLMError:
    """An ``LLMError`` for ``exc`` (kept as the cause by the caller), which is scrubbed in
    place, because a traceback prints the cause's text too. ``who``: ``model 'x' (m at url)``."""
    exc.args = tuple(scrub(a) if isinstance(a, str) else a for a in exc.args)
    if isinstance(getattr(exc, "message", None), str):
        exc.message = scrub(exc.message)  # type: ignore[attr-defined]
    if hasattr(exc, "body"):
        exc.body = None  # type: ignore[attr-defined]  # the raw reply: may echo the key
    status: int | None = None
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        msg = f"{who} failed with HTTP {status}: {exc.message}"
        ctype = exc.response.headers.get("content-type", "")
        if "json" not in ctype:  # an HTML error page from a proxy says nothing useful as is
            msg += f" — {describe_body(exc.response.text, ctype)}"
    elif isinstance(exc, openai.APITimeoutError):
        msg = f"{who} timed out after {timeout:g}s"
    elif isinstance(exc, openai.APIConnectionError):
        msg = f"{who} connection failed: {exc}"
    else:
        msg = f"{who} failed: {exc}"
    err = LLMError(scrub(msg))
    err.status_code = status  # type: ignore[attr-defined]  # survives pickling (in __dict__)
    err.retry_after = retry_after(exc)  # type: ignore[attr-defined]
    return err

