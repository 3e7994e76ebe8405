"""What a step's helper calls cost: a tally the step opens, every engine call site charges.

The loop's own call is counted by ``loop.on_llm_reply`` and the synthesis by the answer
step; the calls a step makes on the side — tool selection (each structured-output level and
repair), context compaction — charge the tally open around them (a context variable, so
concurrent runs of one process never mix). The step adds the tally to ``state.usage``: a
run's ``usage`` is everything it was billed for.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from reactq.shared.models import Usage

__all__ = ["Tally", "charge", "tally"]


@dataclass
class Tally:
    usage: Usage = field(default_factory=Usage)


_open: contextvars.ContextVar[Tally | None] = contextvars.ContextVar("reactq_tally", default=None)


@contextmanager
def tally() -> Iterator[Tally]:
    """Open a tally; calls charged inside it are added to it."""
    t = Tally()
    token = _open.set(t)
    try:
        yield t
    finally:
        _open.reset(token)


def charge(usage: dict[str, Any] | None) -> None:
    """Add one call's provider usage to the open tally (no tally: nothing to do)."""
    t = _open.get()
    if t is not None and usage:
        t.usage = t.usage + Usage.from_dict(usage)
