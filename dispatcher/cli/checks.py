"""Argument checks of the CLI, done before anything is read from Redis or submitted.

Each returns what is wrong (a usage error, exit 2) or None.
"""

from __future__ import annotations

import os
from pathlib import Path

from reactq.shared.errors import RequestError
from reactq.shared.inputs import check_id, clip, stream_id_problem


def id_problem(value: str, what: str) -> str | None:
    try:
        check_id(value, what)
    except RequestError as exc:
        return str(exc)
    return None


def after_problem(after: str | None) -> str | None:
    why = stream_id_problem(after)
    return None if why is None else f"--after {clip(repr(after))}: {why}"


def input_file_problem(path: Path) -> str | None:
    """A batch input must be UTF-8 text (a BOM is fine): no NUL bytes, no other encoding."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return f"{path}: cannot read it ({exc.strerror})"
    nul = raw.find(b"\x00")
    if nul >= 0:
        return f"{path}: is a binary file (NUL byte at offset {nul}), not JSONL"
    try:
        raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return f"{path}: is not UTF-8 text (byte {exc.start}: {exc.reason}); re-encode it as UTF-8"
    return None


def output_file_problem(path: Path) -> str | None:
    """The results file must be appendable now, not after the runs were paid for."""
    if path.is_dir():
        return f"--output {path}: is a directory"
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        return f"--output {path}: the folder {parent} does not exist"
    if path.exists() and not os.access(path, os.W_OK):
        return f"--output {path}: not writable"
    if not path.exists() and not os.access(parent, os.W_OK | os.X_OK):
        return f"--output {path}: cannot create a file in {parent}"
    return None
