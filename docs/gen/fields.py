"""Reading what a class's fields mean from its source: the docstring under a field, or else the
comment lines right above it."""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any


def field_docs(cls: type) -> dict[str, str]:
    """Field name → its meaning, for ``cls`` and its bases (the nearest class wins)."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.startswith(("reactq.", "docs.")):
            out.update(_own_docs(klass))
    return out


def _own_docs(cls: type) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    docs: dict[str, str] = {}
    for i, node in enumerate(body.body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        after = body.body[i + 1] if i + 1 < len(body.body) else None
        if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
            docs[node.target.id] = " ".join(inspect.cleandoc(after.value.value).split())
            continue
        comment: list[str] = []
        row = node.lineno - 2
        while row >= 0 and lines[row].strip().startswith("#"):
            comment.insert(0, lines[row].strip().lstrip("#").strip())
            row -= 1
        if comment:
            docs[node.target.id] = " ".join(comment)
    return docs


def annotation(cls: type, name: str) -> str:
    """The field's annotation as written in the source (``str | None``)."""
    for klass in cls.__mro__:
        raw: Any = klass.__dict__.get("__annotations__", {}).get(name)
        if raw is not None:
            return raw if isinstance(raw, str) else getattr(raw, "__name__", repr(raw))
    return ""


def constraints(metadata: list[Any]) -> str:
    """``≥ 1, ≤ 200`` from a pydantic field's metadata."""
    signs = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "min_length": "length ≥", "max_length": "length ≤"}
    out = []
    for item in metadata:
        for attr, sign in signs.items():
            value = getattr(item, attr, None)
            if value is not None:
                out.append(f"{sign} {value}")
    return ", ".join(out)


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")
