"""``current_time``: the current time in an IANA time zone, ISO-8601."""

from __future__ import annotations

import difflib
import functools
import zoneinfo
from datetime import datetime

from pydantic import BaseModel, Field
from reactq.shared.errors import ToolError
from reactq.shared.tools.base import Tool

# --------------------------------------------------------------------------- current_time


class CurrentTimeArgs(BaseModel):
    timezone: str = Field(
        "UTC",
        description="An IANA time zone name, e.g. 'UTC', 'Europe/Paris', 'America/New_York'.",
        max_length=64,
    )


@functools.lru_cache(maxsize=1)
def _available_zones() -> frozenset[str]:
    """Walking the zone database costs tens of milliseconds: once per process."""
    return frozenset(zoneinfo.available_timezones())


def _zone(name: str) -> zoneinfo.ZoneInfo:
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        pass
    available = _available_zones()
    by_lower = {z.lower(): z for z in available}
    if name.lower() in by_lower:
        return zoneinfo.ZoneInfo(by_lower[name.lower()])
    close = difflib.get_close_matches(name, sorted(available), n=3)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise ToolError(
        f"Unknown timezone '{name}'. Use an IANA name such as 'UTC' or 'Europe/Paris'.{hint}"
    )


def _current_time(timezone: str = "UTC") -> str:
    return datetime.now(_zone(timezone.strip())).isoformat(timespec="seconds")


current_time = Tool(
    name="current_time",
    description="Return the current date and time (ISO-8601, with UTC offset) in a time zone.",
    args_model=CurrentTimeArgs,
    fn=_current_time,
    isolate=False,
)
