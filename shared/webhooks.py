"""Webhooks, the pure part: message ids, payloads, what an answer means, when to try again.

A webhook message tells a caller that something it started has ended (``run.done``,
``dag.done``, ``batch.done``) or needs a person (``approval.requested``). Its body is
``{type, timestamp, data}``, built once and stored with the delivery, so every attempt sends
the same bytes under the same ``webhook-id`` (the Standard Webhooks headers are signed per
attempt: ``webhook-timestamp`` is the attempt's time). The I/O lives elsewhere: the delivery
log in ``reactq.shared.stores.webhooks``, the attempts in ``reactq.workers.webhooks``.

Ids are derived from what the message is about (``msg_run_<run id>``, ``msg_dag_<id>``,
``msg_batch_<id>``, ``msg_approval_<approval id>``), so whoever notices a terminal state
first, and whoever notices it again after a crash, names the same delivery: it is made once.

Retries: connection errors, timeouts, 408, 429 and 5xx are tried again, retry *n* after
``backoff × 2^(n-1)`` seconds, capped at ``MAX_BACKOFF_S`` (a 429's or 503's
``Retry-After`` is honoured when longer, up to ``MAX_RETRY_AFTER_S``); jitter only lengthens
a wait. Any other answer below 200 or from 300 up is final, 2xx is delivered.
"""

from __future__ import annotations

import email.utils
import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

__all__ = [
    "DONE_TYPES", "MAX_BACKOFF_S", "Verdict", "body", "due_member", "judge", "parse_retry_after",
    "parse_webhook_id", "retry_delay", "webhook_id",
]

Kind = Literal["run", "dag", "batch", "approval"]
#: The message type a terminal owner sends, by owner kind.
DONE_TYPES: dict[str, str] = {"run": "run.done", "dag": "dag.done", "batch": "batch.done"}
APPROVAL_TYPE = "approval.requested"
MAX_BACKOFF_S = 300.0
#: A receiver's Retry-After is honoured up to this long.
MAX_RETRY_AFTER_S = 3600.0
_RETRYABLE_STATUS = {408, 429}
_KINDS = ("run", "dag", "batch", "approval")


def webhook_id(kind: str, owner_id: str) -> str:
    """The delivery's id (``webhook-id``): the same for the same message, whoever makes it."""
    return f"msg_{kind}_{owner_id}"


def parse_webhook_id(wid: str) -> tuple[str, str] | None:
    """(owner kind, owner id) of a webhook id, or None for one this version does not know."""
    head, _, rest = wid.partition("_")
    kind, _, owner = rest.partition("_")
    if head != "msg" or kind not in _KINDS or not owner:
        return None
    return kind, owner


def due_member(wid: str) -> str:
    """The delivery's member in the ``due`` set and its lease name (``shared/stores/due.py``)."""
    return f"webhook:{wid}"


def body(msg_type: str, data: dict[str, Any], at: float) -> str:
    """The JSON body every attempt sends: ``{type, timestamp, data}`` (timestamp ISO 8601 UTC)."""
    stamp = datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")
    return json.dumps({"type": msg_type, "timestamp": stamp, "data": data},
                      ensure_ascii=False, separators=(",", ":"))


def run_data(run_id: str, status: str, result: dict[str, Any] | None,
             request: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``data`` of ``run.done``: the run's id, status and result (answer, output, usage…)."""
    res = result or {}
    data: dict[str, Any] = {
        "run_id": run_id, "status": status, "answer": res.get("answer"),
        "output": res.get("output"), "usage": res.get("usage") or {},
        "iterations": res.get("iterations"), "elapsed": res.get("elapsed"),
        "error": res.get("error"), "metadata": request.get("metadata") or {},
    }
    data.update({k: v for k, v in extra.items() if v not in (None, "")})
    return data


@dataclass(frozen=True)
class Verdict:
    """What one attempt's answer means: ``delivered``, ``retry`` (after ``retry_after`` s
    when the receiver named a wait) or ``final`` (given up: the receiver refused it)."""

    outcome: Literal["delivered", "retry", "final"]
    retry_after: float | None = None


def judge(status_code: int | None, retry_after: str | None = None, now: float = 0.0) -> Verdict:
    """The verdict on an attempt: ``status_code`` None = no answer (connection error, timeout)."""
    if status_code is None:
        return Verdict("retry")
    if 200 <= status_code < 300:
        return Verdict("delivered")
    if status_code in _RETRYABLE_STATUS or status_code >= 500:
        wait = parse_retry_after(retry_after, now) if status_code in (429, 503) else None
        return Verdict("retry", wait)
    return Verdict("final")


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER_S)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return min(max(0.0, when.timestamp() - now), MAX_RETRY_AFTER_S)


def retry_delay(failed_attempts: int, backoff_s: float, retry_after: float | None = None,
                jitter: float | None = None) -> float:
    """The wait before the next attempt after ``failed_attempts`` (≥ 1) failed ones:
    ``backoff_s × 2^(n-1)`` capped at ``MAX_BACKOFF_S``, or the receiver's longer
    ``retry_after``, plus a jitter of up to 10 % (``jitter`` in [0, 1) for tests)."""
    n = max(1, failed_attempts)
    base = min(backoff_s * 2 ** (n - 1), MAX_BACKOFF_S)
    if retry_after is not None:
        base = max(base, retry_after)
    share = random.random() if jitter is None else jitter  # noqa: S311 (not a secret)
    return float(base * (1 + 0.1 * share))
