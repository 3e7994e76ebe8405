"""Checks for raw input at every door (HTTP bodies, JSONL lines, CLI arguments).

* ``loads_strict``: JSON as RFC 8259 has it — no ``NaN`` / ``Infinity``, no lone surrogates
  (they cannot be stored as UTF-8), nesting at most ``MAX_DEPTH`` deep (the C parser would
  otherwise hit Python's recursion limit on a megabyte of ``[``).
* ``check_id``: ids are used to build Redis keys, so ``ID:events`` must never get that far.
* ``check_stream_id``: a Redis stream id, each part a 64-bit unsigned integer.

Each raises ``RequestError`` naming the field; messages never echo more than ``ECHO`` chars.
"""

from __future__ import annotations

import json
import re
from typing import Any

from reactq.shared.errors import RequestError

MAX_DEPTH = 32
ECHO = 80
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
ID_PATTERN = ID_RE.pattern
STREAM_ID_RE = re.compile(r"^(\d{1,20})(?:-(\d{1,20}))?$")
_U64 = 2**64 - 1
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def clip(text: str, limit: int = ECHO) -> str:
    """``text`` cut to ``limit`` characters (an error message never echoes a whole input)."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} chars)"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (numbers must be finite)")


def _finite(literal: str) -> float:
    value = float(literal)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{clip(literal, 20)} is out of range (numbers must be finite)")
    return value


def _depth(text: str) -> int:
    deepest = depth = 0
    for m in _BRACKET.finditer(_STRING.sub('""', text)):
        depth += 1 if m.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _check_strings(obj: Any, field: str | None) -> None:
    stack = [obj]
    while stack:
        cur = stack.pop()
        if isinstance(cur, str):
            if _SURROGATE.search(cur):
                raise RequestError("contains a lone UTF-16 surrogate (not valid Unicode)", field=field)
        elif isinstance(cur, dict):
            stack.extend(cur.keys())
            stack.extend(cur.values())
        elif isinstance(cur, list):
            stack.extend(cur)


def decode_utf8(raw: bytes, field: str | None = "body") -> str:
    """UTF-8 text (a leading BOM dropped), else ``RequestError`` naming the byte offset."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise RequestError(f"is not UTF-8 (byte {exc.start}: {exc.reason})", field=field) from None


def loads_strict(text: str | bytes, *, field: str | None = "body", max_depth: int = MAX_DEPTH) -> Any:
    """Parse strict JSON or raise ``RequestError(field=field)`` saying what is wrong."""
    if isinstance(text, bytes):
        text = decode_utf8(text, field)
    if text.count("[") + text.count("{") > max_depth and _depth(text) > max_depth:
        raise RequestError(f"is nested more than {max_depth} levels deep", field=field)
    try:
        obj = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except ValueError as exc:  # JSONDecodeError is a ValueError
        raise RequestError(f"is not valid JSON: {clip(str(exc), 200)}", field=field) from None
    _check_strings(obj, field)
    return obj


def check_id(value: str, field: str) -> str:
    """``value`` when it is a well-formed id, else ``RequestError`` naming ``field``."""
    if not ID_RE.match(value):
        raise RequestError(f"{field}: not a valid id: {clip(repr(value), ECHO)} "
                           f"(letters, digits, '_', '-', '.'; at most 128)", field=field)
    return value


def stream_id_problem(cursor: str | None) -> str | None:
    """None when ``cursor`` is a valid stream id (or absent), else what is wrong."""
    if cursor is None:
        return None
    m = STREAM_ID_RE.match(cursor)
    if m is None or any(p is not None and int(p) > _U64 for p in m.groups()):
        return "must be a Redis stream id: <ms> or <ms>-<seq>, each at most 2^64-1"
    return None
