"""The events reference, from ``CHANNEL_DOCS`` in ``reactq.shared.events``."""

from __future__ import annotations

from docs.gen.fields import cell


def render() -> str:
    from reactq.shared.events import CHANNEL_DOCS, CHANNELS

    missing = [c for c in CHANNELS if c not in CHANNEL_DOCS]
    if missing:
        raise ValueError(f"channels without documentation in reactq.shared.events.CHANNEL_DOCS: {missing}")
    lines = ["# Events", "",
             "A run's events, in order, each on a channel with a JSON payload. The same events are the "
             "Redis stream entries (`event` = channel, `data` = JSON), the SSE frames of "
             "`GET /v1/runs/{id}/events` (`id:` = stream id, `event:` = channel, `data:` = JSON) and "
             "the lines of `reactq watch --json`. Every payload carries `seq` (1, 2, 3 … per run), "
             "so a client that reconnects with `Last-Event-ID` sees each event exactly once. "
             "Fields may be added; none is renamed. Generated from `reactq.shared.events`.", ""]
    for channel in CHANNELS:
        doc = CHANNEL_DOCS[channel]
        lines += [f"## `{channel}`", "", doc.summary, "", "| Field | Meaning |", "|---|---|"]
        for name, meaning in doc.fields.items():
            names = ", ".join(f"`{n.strip()}`" for n in name.split(","))
            lines.append(f"| {names} | {cell(meaning)} |")
        lines.append("")
    return "\n".join(lines)
