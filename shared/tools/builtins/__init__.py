"""Built-in tools: small, safe, deterministic helpers every deployment has.

=================  ==========================================================
``calculator``     arithmetic, parsed with :mod:`ast` (never ``eval``)
``current_time``   the current time in an IANA time zone, ISO-8601
``json_query``     pick a value out of a JSON document by a ``a.b[0].c`` path
``text_stats``     characters, words, lines and sentences of a text
``echo``           returns its input (for demos and tests)
``add``            the sum of two numbers (used by tests and the scripted demo)
``sleep``          waits up to 30 s (for demos and tests of parallel tool calls)
``http_fetch``     GET/HEAD of a public URL as readable text, SSRF-guarded
                   (:mod:`reactq.shared.tools.http_fetch`)
=================  ==========================================================

``echo``, ``add`` and ``sleep`` are demo/test tools (``DEMO_TOOLS``): workers register them
only with ``REACTQ_DEMO_TOOLS=true`` (one reply of 32 ``sleep(20)`` calls must not be able to
occupy a fleet).

Every built-in is bounded: no argument within its limits makes a call burn more than about
100 ms of CPU (``tests/unit/test_builtin_bounds.py``), so they run in the worker
(``isolate=False``) rather than in a tool-runner process.

Errors are raised as :class:`~reactq.shared.errors.ToolError` with a message written for the
LLM (the engine turns it into an error observation); bad arguments never reach the
function, because :meth:`Tool.invoke` validates them against the pydantic model first.

Number formatting (``calculator`` and ``add``): integers stay exact (``17*23`` → ``391``,
``2**100`` → all 31 digits). Floats are printed with 15 significant digits
(``format(x, ".15g")``), which drops binary noise (``0.1+0.2`` → ``0.3``) and prints
integral floats without a trailing ``.0`` (``6/3`` → ``2``); very large or small floats
use exponent notation (``1e+20``). ``-0.0`` prints as ``0``.
"""

from __future__ import annotations

from reactq.shared.tools.base import Tool, ToolRegistry
from reactq.shared.tools.builtins.clock import current_time
from reactq.shared.tools.builtins.demo import add, echo, sleep
from reactq.shared.tools.builtins.jsonq import json_query
from reactq.shared.tools.builtins.numbers import (
    MAX_DOCUMENT_CHARS,
    MAX_ROUND_DIGITS,
    calculator,
    evaluate,
    format_number,
)
from reactq.shared.tools.builtins.text import text_stats
from reactq.shared.tools.http_fetch import http_fetch_tool

__all__ = [
    "BUILTIN_TOOLS",
    "DEMO_TOOLS",
    "MAX_DOCUMENT_CHARS",
    "MAX_ROUND_DIGITS",
    "add",
    "builtin_registry",
    "calculator",
    "current_time",
    "echo",
    "evaluate",
    "format_number",
    "http_fetch",
    "json_query",
    "sleep",
    "text_stats",
]

http_fetch = http_fetch_tool()
"""``http_fetch`` with the default limits and no allowlist; workers build theirs from
``Settings`` (``REACTQ_HTTP_FETCH_*``) in :func:`reactq.shared.tools.loader.default_registry`."""

BUILTIN_TOOLS: list[Tool] = [calculator, current_time, json_query, text_stats, http_fetch]
"""The built-in tools every worker registers, in registration order."""
DEMO_TOOLS: list[Tool] = [echo, add, sleep]
"""Demo/test tools, registered only with ``REACTQ_DEMO_TOOLS=true``."""


def builtin_registry(*, demo: bool = False) -> ToolRegistry:
    """A new registry holding the built-in tools (and the demo tools with ``demo``)."""
    return ToolRegistry(BUILTIN_TOOLS + (DEMO_TOOLS if demo else []))
