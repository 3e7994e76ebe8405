"""``json_query``: pick a value out of a JSON document by a ``a.b[0].c`` path."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field
from reactq.shared.errors import ToolError
from reactq.shared.tools.base import Tool
from reactq.shared.tools.builtins.numbers import MAX_DOCUMENT_CHARS

# --------------------------------------------------------------------------- json_query


class JsonQueryArgs(BaseModel):
    data: str = Field(description="A JSON document, as text.", max_length=MAX_DOCUMENT_CHARS)
    path: str = Field(
        max_length=1000,
        description=(
            "Where the value is: keys separated by dots, list indexes in brackets, e.g. "
            "'a.b[0].c', 'items[-1]', 'a[\"key.with.dots\"]'. Empty = the whole document."
        ),
    )


_PATH_TOKEN = re.compile(
    r"""
    \.?(?P<key>[^.\[\]"']+)            # a bare key, optionally after a dot
    | \[\s*(?P<index>-?\d+)\s*\]        # [0], [-1]
    | \[\s*"(?P<dq>(?:[^"\\]|\\.)*)"\s*\]  # ["quoted key"]
    | \[\s*'(?P<sq>(?:[^'\\]|\\.)*)'\s*\]  # ['quoted key']
    """,
    re.VERBOSE,
)


def _parse_path(path: str) -> list[str | int]:
    """``a.b[0]["x.y"]`` → ``["a", "b", 0, "x.y"]``; a leading ``$`` is ignored."""
    text = path.strip()
    if text.startswith("$"):
        text = text[1:]
    steps: list[str | int] = []
    pos = 0
    while pos < len(text):
        m = _PATH_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ToolError(f"Invalid path '{path}' at position {pos}: {text[pos:pos + 10]!r}")
        if m.group("index") is not None:
            steps.append(int(m.group("index")))
        else:
            key = m.group("key")
            if key is None:
                quoted = m.group("dq") if m.group("dq") is not None else m.group("sq")
                key = re.sub(r"\\(.)", r"\1", quoted or "")
            steps.append(key)
        pos = m.end()
    return steps


def _describe(path: list[str | int]) -> str:
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return out or "(root)"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a string" if isinstance(value, str) else "a number"


def _json_query(data: str, path: str) -> str:
    try:
        value: Any = json.loads(data)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, too many int digits, nesting
        raise ToolError(f"Invalid JSON in 'data': {exc}") from None
    walked: list[str | int] = []
    for step in _parse_path(path):
        if isinstance(value, list):
            if isinstance(step, str) and re.fullmatch(r"-?\d+", step):
                step = int(step)  # `items.0` works like `items[0]`
            if not isinstance(step, int):
                raise ToolError(
                    f"Path '{path}' not found: {_describe(walked)} is a list; use an index like [0]"
                )
            if not -len(value) <= step < len(value):
                raise ToolError(
                    f"Path '{path}' not found: index {step} out of range at {_describe(walked)} "
                    f"(list of length {len(value)})"
                )
            value = value[step]
        elif isinstance(value, dict):
            key = str(step)
            if key not in value:
                keys = list(value)[:20]
                raise ToolError(
                    f"Path '{path}' not found: no key '{key}' at {_describe(walked)} "
                    f"(available keys: {keys})"
                )
            value = value[key]
        else:
            raise ToolError(
                f"Path '{path}' not found: {_describe(walked)} is {_json_type(value)}, "
                f"not an object or a list"
            )
        walked.append(step)
    return json.dumps(value, ensure_ascii=False)


json_query = Tool(
    name="json_query",
    inline=True,
    isolate=False,
    description=(
        "Extract a value from a JSON document by a path like 'a.b[0].c'; returns the value "
        "as JSON."
    ),
    args_model=JsonQueryArgs,
    fn=_json_query,
)
