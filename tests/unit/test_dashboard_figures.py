"""The dashboard's arithmetic (pure): minutes, statuses, tokens, histogram percentiles."""

from __future__ import annotations

import json

from reactq.shared.observe.dashboard import MINUTES, RunPoint, build, merge_buckets, quantile, run_point, turn_times


def test_a_run_hash_becomes_a_point_and_a_gone_one_none():
    p = run_point({"status": "succeeded", "created_at": "100.5",
                   "result": json.dumps({"usage": {"prompt_tokens": 7, "completion_tokens": 3}})})
    assert p == RunPoint("succeeded", 100.5, 7, 3)
    assert run_point({"status": "queued", "created_at": "1", "result": None}) == RunPoint("queued", 1.0)
    assert run_point({"status": "failed", "created_at": "1", "result": "not json"}) == RunPoint("failed", 1.0)
    assert run_point({"status": None}) is None


def test_minutes_count_runs_by_the_minute_they_were_created():
    now = 60 * 1000 + 30  # half a minute into a minute
    pts = [RunPoint("succeeded", now - 5, 10, 5), RunPoint("failed", now - 65), RunPoint("succeeded", now - 4000)]
    d = build(pts, now, truncated=False, turn_buckets=None, in_flight=None, queues=None)
    assert d["runs"] == 2 and d["by_status"] == {"succeeded": 1, "failed": 1}
    assert d["tokens"] == {"prompt": 10, "completion": 5, "total": 15}
    assert len(d["minutes"]) == MINUTES and d["minutes"][-1]["t"] == 60 * 1000
    assert d["minutes"][-1]["counts"] == {"succeeded": 1} and d["minutes"][-1]["tokens"] == 15
    assert d["minutes"][-2]["counts"] == {"failed": 1}
    assert d["turn_seconds"] is None and d["queue_depth"] is None


def test_percentiles_from_per_bucket_counts_as_histogram_quantile_does():
    fields = [(["m", "native", "0.5"], 2.0), (["m", "native", "1.0"], 1.0), (["n", "text", "1.0"], 1.0),
              (["m", "native", "sum"], 2.0), (["n", "text", "sum"], 1.0), (["odd"], 9.0)]
    b = merge_buckets(fields)
    assert b == {"0.5": 2.0, "1.0": 2.0, "sum": 3.0}
    assert quantile(b, 0.5) == 0.5  # half of the 4 turns took ≤ 0.5 s
    assert quantile(b, 0.95) == 0.5 + 0.5 * (3.8 - 2) / 2
    assert turn_times(b) == {"count": 4, "p50": 0.5, "p95": quantile(b, 0.95), "mean": 0.75}
    assert quantile({"+Inf": 3.0}, 0.5) == 300.0  # beyond the last bound: the last bound
    assert turn_times({}) == {"count": 0, "p50": None, "p95": None, "mean": None}
