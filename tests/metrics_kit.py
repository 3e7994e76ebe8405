"""Reading what workers count: they sum their counters in memory and write them once every
``REACTQ_METRICS_FLUSH_S`` (1 s), so a test reads again until the figure it waits for is in."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def settled(read: Callable[[], T], ready: Callable[[T], object], timeout: float = 5.0) -> T:
    """``read()`` once ``ready`` of it holds, or its last reading at ``timeout`` (the caller's
    assertions then say what is missing)."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if ready(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.1)
