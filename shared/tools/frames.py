"""The framing between a worker and its tool-runner children: length-prefixed pickles over a
pipe between two processes of the same installation (never the queue, which is JSON only)."""

from __future__ import annotations

import os
import pickle
import struct
from typing import Any

_HEADER = struct.Struct("!I")


def read_frame(fd: int) -> Any:
    """One pickled frame from ``fd``; EOFError when the other side closed the pipe."""
    head = _read_exact(fd, _HEADER.size)
    return pickle.loads(_read_exact(fd, _HEADER.unpack(head)[0]))


def write_frame(fd: int, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, n: int) -> bytes:
    parts: list[bytes] = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            raise EOFError
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)
