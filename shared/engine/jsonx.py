"""Lenient JSON extraction from LLM output and argument hashing.

Models wrap JSON in prose or code fences and often emit invalid escapes (``\\d`` in a
regex) or raw newlines inside strings. ``extract_json`` tries, in order: the whole text,
each fenced block, then each balanced ``{…}`` found by a string-aware brace scan. Every
candidate is parsed as-is first and then once more after a repair pass.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from typing import Any

__all__ = ["extract_json", "md5_args", "text_json"]

# ``json.dumps`` with any keyword builds a new encoder per call; these are built once (same
# output: the keywords are the encoder's), as arguments are encoded several times a turn.
text_json = json.JSONEncoder(ensure_ascii=False).encode
"""``json.dumps(value, ensure_ascii=False)``."""
_stable_json = json.JSONEncoder(ensure_ascii=False, sort_keys=True, default=str).encode

_FENCE = re.compile(r"```[ \t]*(?:json|JSON|json5)?[ \t]*\r?\n?(.*?)```", re.DOTALL)
_VALID_ESCAPES = frozenset('"\\/bfnrtu')
_HEX = frozenset("0123456789abcdefABCDEF")
# A prose reply can hold many stray braces; bound the scan so a pathological reply
# cannot make extraction quadratic in practice.
_MAX_BRACE_CANDIDATES = 64


class _NotADict(Exception):
    """The text is valid JSON, but not an object (e.g. a top-level list)."""


def extract_json(text: str | None) -> dict[str, Any] | None:
    """The first JSON object found in ``text``, or ``None``. Never raises."""
    if not text or not isinstance(text, str):
        return None
    stripped = text.strip()
    try:
        whole = _parse(stripped)
    except _NotADict:
        # Pure JSON that is not an object (list, number…) is an answer of the wrong shape.
        return None
    if whole is not None:
        return whole
    for candidate in _candidates(stripped):
        try:
            found = _parse(candidate)
        except _NotADict:
            continue
        if found is not None:
            return found
    return None


def md5_args(args: dict[str, Any] | None) -> str:
    """A stable hash of tool arguments (key order does not matter)."""
    dumped = _stable_json(args or {})
    return hashlib.md5(dumped.encode("utf-8")).hexdigest()


def _candidates(text: str) -> Iterator[str]:
    """Fenced blocks first, then balanced objects embedded in prose."""
    for match in _FENCE.finditer(text):
        yield match.group(1).strip()
    yield from _balanced_objects(text)


def _parse(candidate: str) -> dict[str, Any] | None:
    """Parse ``candidate`` strictly, then repaired; ``_NotADict`` for valid non-objects."""
    if not candidate:
        return None
    for attempt in (candidate, _repair(candidate)):
        try:
            value = json.loads(attempt, strict=False)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
        raise _NotADict
    return None


def _balanced_objects(text: str) -> Iterator[str]:
    """Each balanced ``{…}`` span, in order of its opening brace."""
    start = text.find("{")
    for _ in range(_MAX_BRACE_CANDIDATES):
        if start == -1:
            return
        end = _matching_brace(text, start)
        # An unbalanced opening (e.g. "{name" in prose) may still hold a real object.
        if end is not None:
            yield text[start : end + 1]
        start = text.find("{", start + 1)


def _matching_brace(text: str, start: int) -> int | None:
    """Index of the brace closing ``text[start]``, skipping braces inside strings."""
    depth = 0
    in_string = False
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def _repair(text: str) -> str:
    """Double invalid backslashes and escape raw control characters inside strings."""
    out: list[str] = []
    in_string = False
    i = 0
    while i < len(text):
        ch = text[i]
        if not in_string:
            in_string = ch == '"'
            out.append(ch)
        elif ch == '"':
            in_string = False
            out.append(ch)
        elif ch == "\\":
            escape = _repair_escape(text, i)
            out.append(escape)
            i += 1 if escape == "\\\\" else 2
            continue
        else:
            out.append(_escape_control(ch))
        i += 1
    return "".join(out)


def _repair_escape(text: str, i: int) -> str:
    """The escape starting at ``text[i]`` if valid, else an escaped lone backslash."""
    nxt = text[i + 1 : i + 2]
    if nxt == "u":
        digits = text[i + 2 : i + 6]
        valid = len(digits) == 4 and all(c in _HEX for c in digits)
    else:
        valid = nxt != "" and nxt in _VALID_ESCAPES
    return "\\" + nxt if valid else "\\\\"


def _escape_control(ch: str) -> str:
    """Raw newlines, tabs and other control characters are illegal inside JSON strings."""
    if ch == "\n":
        return "\\n"
    if ch == "\r":
        return "\\r"
    if ch == "\t":
        return "\\t"
    if ord(ch) < 0x20:
        return f"\\u{ord(ch):04x}"
    return ch
