"""What an eval adds up to, and what changed between two evals.

A case record is ``{case_id, line, run_id, status, scores: {evaluator: {value, passed,
reason}}, answer, output, cost_usd, tokens, turns, latency_ms, judge_cost_usd, error,
passed}``. A case **passes** when its run succeeded and every evaluator that applies to it
passed; an evaluator's ``pass_rate`` and ``mean`` are over the cases it scored. The overall
``pass_rate`` (what ``--fail-under`` checks) is over the cases that ran: an ``invalid`` line
is reported in ``counts`` but is not a case that ran.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["case_passed", "compare", "percentile", "summarize"]

COST_DIGITS = 11


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return round(ordered[rank - 1], 3)


def case_passed(status: str, scores: Mapping[str, Mapping[str, Any]]) -> bool:
    return status == "succeeded" and all(bool(s.get("passed")) for s in scores.values())


def _by_evaluator(cases: Sequence[Mapping[str, Any]], evaluators: Iterable[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in evaluators:
        got = [c["scores"][name] for c in cases if name in (c.get("scores") or {})]
        n = len(got)
        out[name] = {"pass_rate": round(sum(1 for s in got if s["passed"]) / n, 6) if n else None,
                     "mean": round(sum(float(s["value"]) for s in got) / n, 6) if n else None,
                     "scored": n}
    return out


def summarize(cases: Sequence[Mapping[str, Any]], evaluators: list[str], *, total: int) -> dict[str, Any]:
    """``{counts, pass_rate, scores, cost_usd, judge_cost_usd, tokens, latency_ms}`` of the
    case records so far (``total``: the eval's number of lines)."""
    ran = [c for c in cases if c["status"] != "invalid"]
    counts = {"total": total, "done": len(cases), "passed": sum(1 for c in ran if c.get("passed")),
              **{k: sum(1 for c in cases if c["status"] == k)
                 for k in ("succeeded", "failed", "cancelled", "skipped", "invalid")}}
    latencies = [float(c["latency_ms"]) for c in ran if c.get("run_id") and c.get("latency_ms") is not None]
    return {
        "counts": counts,
        "pass_rate": round(counts["passed"] / len(ran), 6) if ran else None,
        "scores": _by_evaluator(cases, evaluators),
        "cost_usd": round(sum(float(c.get("cost_usd") or 0) for c in cases), COST_DIGITS),
        "judge_cost_usd": round(sum(float(c.get("judge_cost_usd") or 0) for c in cases), COST_DIGITS),
        "tokens": sum(int(c.get("tokens") or 0) for c in cases),
        "latency_ms": {"p50": percentile(latencies, 50), "p95": percentile(latencies, 95)},
    }


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(b - a, 6)


def _case_changes(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    changed: dict[str, Any] = {}
    sa, sb = a.get("scores") or {}, b.get("scores") or {}
    for name in sorted(set(sa) | set(sb)):
        x, y = sa.get(name), sb.get(name)
        if x is None or y is None or x["value"] != y["value"] or x["passed"] != y["passed"]:
            changed[name] = {"a": x, "b": y}
    return changed


def compare(a: Mapping[str, Any], a_cases: Sequence[Mapping[str, Any]],
            b: Mapping[str, Any], b_cases: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per case what changed, by evaluator (cases matched by id), and the aggregate deltas.
    ``fixed``: cases that failed in ``a`` and pass in ``b``; ``broken``: the reverse."""
    left = {c["case_id"]: c for c in a_cases if c["status"] != "invalid"}
    right = {c["case_id"]: c for c in b_cases if c["status"] != "invalid"}
    common = [k for k in left if k in right]
    cases: list[dict[str, Any]] = []
    fixed: list[str] = []
    broken: list[str] = []
    for key in common:
        x, y = left[key], right[key]
        changes = _case_changes(x, y)
        flip = None
        if bool(x.get("passed")) != bool(y.get("passed")):
            flip = "fixed" if y.get("passed") else "broken"
            (fixed if flip == "fixed" else broken).append(key)
        if changes or flip or x["status"] != y["status"]:
            cases.append({"case_id": key, "flipped": flip, "status": {"a": x["status"], "b": y["status"]},
                          "scores": changes})
    names = sorted(set(a.get("scores") or {}) | set(b.get("scores") or {}))
    sa, sb = a.get("scores") or {}, b.get("scores") or {}
    deltas = {n: {"pass_rate": _delta((sa.get(n) or {}).get("pass_rate"), (sb.get(n) or {}).get("pass_rate")),
                  "mean": _delta((sa.get(n) or {}).get("mean"), (sb.get(n) or {}).get("mean"))} for n in names}
    la, lb = a.get("latency_ms") or {}, b.get("latency_ms") or {}
    return {
        "a": a.get("eval_id"), "b": b.get("eval_id"),
        "fixed": fixed, "broken": broken, "cases": cases,
        "only_in_a": [k for k in left if k not in right], "only_in_b": [k for k in right if k not in left],
        "deltas": {"pass_rate": _delta(a.get("pass_rate"), b.get("pass_rate")), "scores": deltas,
                   "cost_usd": round(float(b.get("cost_usd") or 0) - float(a.get("cost_usd") or 0), COST_DIGITS),
                   "judge_cost_usd": round(float(b.get("judge_cost_usd") or 0) - float(a.get("judge_cost_usd") or 0),
                                           COST_DIGITS),
                   "latency_ms": {"p50": _delta(la.get("p50"), lb.get("p50")),
                                  "p95": _delta(la.get("p95"), lb.get("p95"))}},
    }
