"""The viewer's dashboard, computed from what the workers already record (pure functions).

Two sources, both read by ``reactq.shared.stores.dashboard``:

* the runs of the last hour (the run index, ``created_at`` in the window) with their status
  and the usage their result reports → runs per minute (by status), runs by status, tokens;
* the ``turn_seconds`` histogram the workers fill (per-bucket counts, every label set) →
  the turn-time percentiles (p50 / p95), interpolated inside a bucket as Prometheus'
  ``histogram_quantile`` does. The histogram is cumulative since the counters began, so its
  percentiles cover every turn recorded, not only the last hour's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reactq.shared.observe.metrics_schema import FAMILIES, bucket_label

WINDOW_S = 3600
MINUTES = WINDOW_S // 60
STATUSES = ("queued", "running", "waiting", "succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class RunPoint:
    """What the dashboard needs of one run."""

    status: str
    created_at: float
    tokens_prompt: int = 0
    tokens_completion: int = 0


def run_point(fields: Mapping[str, str | None]) -> RunPoint | None:
    """One run hash's ``status``, ``created_at`` and ``result`` fields → a point (None if gone)."""
    status = fields.get("status")
    if not status:
        return None
    usage: dict[str, Any] = {}
    raw = fields.get("result")
    if raw:
        try:
            usage = dict((json.loads(raw) or {}).get("usage") or {})
        except (ValueError, TypeError, AttributeError):
            usage = {}
    return RunPoint(status, float(fields.get("created_at") or 0.0),
                    _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens")))


def _int(v: Any) -> int:
    try:
        return max(0, int(v or 0))
    except (TypeError, ValueError):
        return 0


def minute_series(points: Iterable[RunPoint], now: float) -> list[dict[str, Any]]:
    """``MINUTES`` buckets, oldest first: ``{t: the minute's start, counts: {status: n}, tokens}``
    (runs by the minute they were created, counted by their status now)."""
    start = math.floor(now / 60) * 60 - (MINUTES - 1) * 60
    out: list[dict[str, Any]] = [{"t": float(start + i * 60), "counts": {}, "tokens": 0}
                                 for i in range(MINUTES)]
    for p in points:
        i = int((p.created_at - start) // 60)
        if 0 <= i < MINUTES:
            m = out[i]
            m["counts"][p.status] = m["counts"].get(p.status, 0) + 1
            m["tokens"] += p.tokens_prompt + p.tokens_completion
    return out


def by_status(points: Iterable[RunPoint]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in points:
        counts[p.status] = counts.get(p.status, 0) + 1
    return counts


def tokens(points: Iterable[RunPoint]) -> dict[str, int]:
    pts = list(points)
    prompt = sum(p.tokens_prompt for p in pts)
    completion = sum(p.tokens_completion for p in pts)
    return {"prompt": prompt, "completion": completion, "total": prompt + completion}


# -- the turn-time histogram -----------------------------------------------------------------

def merge_buckets(fields: Iterable[tuple[Sequence[str], float]]) -> dict[str, float]:
    """Per-bucket counts of every label set summed by bucket bound (``sum`` kept apart);
    ``fields`` are the hash's decoded ``(label values + bucket, count)`` pairs."""
    n = len(FAMILIES["turn_seconds"].labels)
    out: dict[str, float] = {}
    for values, count in fields:
        if len(values) == n + 1:
            out[values[n]] = out.get(values[n], 0.0) + count
    return out


def quantile(buckets: Mapping[str, float], q: float) -> float | None:
    """The ``q`` quantile of per-bucket (not cumulative) counts; None with no observation.
    Linear inside the bucket it falls in; in ``+Inf`` it is the highest finite bound."""
    bounds = FAMILIES["turn_seconds"].buckets
    total = sum(buckets.get(bucket_label(le), 0.0) for le in bounds) + buckets.get("+Inf", 0.0)
    if total <= 0:
        return None
    rank = q * total
    below = 0.0
    lower = 0.0
    for le in bounds:
        c = buckets.get(bucket_label(le), 0.0)
        if c > 0 and below + c >= rank:
            return lower + (le - lower) * ((rank - below) / c)
        below += c
        lower = le
    return float(bounds[-1])


def turn_times(buckets: Mapping[str, float]) -> dict[str, Any]:
    """``{count, p50, p95, mean}`` of the turns the histogram holds."""
    count = sum(v for k, v in buckets.items() if k != "sum")
    mean = buckets.get("sum", 0.0) / count if count else None
    return {"count": int(count), "p50": quantile(buckets, 0.5), "p95": quantile(buckets, 0.95),
            "mean": mean}


def build(points: Sequence[RunPoint], now: float, *, truncated: bool, turn_buckets: Mapping[str, float] | None,
          in_flight: int | None, queues: Mapping[str, int] | None) -> dict[str, Any]:
    """The whole dashboard (``shared.api.ops.Dashboard``'s fields)."""
    window = [p for p in points if now - WINDOW_S <= p.created_at <= now + 60]
    return {
        "now": now,
        "window_s": WINDOW_S,
        "runs": len(window),
        "truncated": truncated,
        "runs_per_minute": round(len(window) / MINUTES, 3),
        "by_status": by_status(window),
        "tokens": tokens(window),
        "minutes": minute_series(window, now),
        "in_flight": in_flight,
        "queue_depth": dict(queues) if queues is not None else None,
        "turn_seconds": turn_times(turn_buckets) if turn_buckets is not None else None,
    }


__all__ = ["MINUTES", "STATUSES", "WINDOW_S", "RunPoint", "build", "merge_buckets", "minute_series",
           "quantile", "run_point", "turn_times"]
