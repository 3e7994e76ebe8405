"""The metrics schema both sides share: workers write ``reactq:metrics:{family}`` hashes,
the gateway reads them. One definition, so writer and reader cannot drift apart.

A hash field is the JSON list of label values; a counter's value is its count; a histogram
keeps one field per bucket (label values + the bucket bound) plus ``sum`` and ``count``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

INFLIGHT = "inflight"
TURNS = "turns"

_LLM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_TOOL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_TURN_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_APPROVAL_BUCKETS = (1.0, 5.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 86400.0, 7 * 86400.0)
_RUN_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


@dataclass(frozen=True)
class Family:
    """One metric family: its hash (``metrics:{name}``) and its Prometheus name."""

    name: str
    kind: Literal["counter", "histogram"]
    help: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...] = ()

    @property
    def prom_name(self) -> str:
        return f"reactq_{self.name}"


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("runs_started", "counter", "Runs started by a worker, by tool-loop mode.", ("mode",)),
    Family("runs_ended", "counter", "Runs that reached a terminal state.", ("status", "mode")),
    Family("run_seconds", "histogram", "Wall time of finished runs, first step to done.",
           ("status",), _RUN_BUCKETS),
    Family("turn_seconds", "histogram",
           "One ReAct turn: the LLM call through its tool calls' fan-in.", ("model", "mode"),
           _TURN_BUCKETS),
    Family("llm_call_seconds", "histogram", "LLM calls (chat and streamed synthesis).",
           ("model",), _LLM_BUCKETS),
    Family("llm_errors", "counter", "Failed LLM calls, by HTTP status or error type.",
           ("model", "code")),
    Family("llm_tokens", "counter", "Tokens the model reported, prompt and completion.",
           ("model", "kind")),
    Family("cost_usd", "counter", "Dollars of priced LLM calls (registry price × reported usage).",
           ("model", "tenant")),
    Family("tool_call_seconds", "histogram", "Tool calls, hooks included.", ("tool",),
           _TOOL_BUCKETS),
    Family("tool_errors", "counter", "Tool calls that failed, were blocked or are uncertain.",
           ("tool", "kind")),
    Family("tool_calls_reused", "counter",
           "Tool calls answered from a recorded ledger (a fork's parent) without executing the tool.",
           ("tool",)),
    Family("forks", "counter", "Forks created, by kind (run, batch line, dag step).", ("kind",)),
    # flow control (reactq.shared.flow)
    Family("flow_wait_seconds", "histogram", "Waits for a model's capacity, by priority.",
           ("model", "priority"), _TURN_BUCKETS),
    Family("flow_provider_429", "counter", "Provider rate-limit answers (429, 503 + Retry-After).",
           ("model", "status")),
    Family("flow_tokens", "counter", "Tokens reserved before calls vs reported after them.",
           ("model", "kind")),
    Family("flow_budget_stops", "counter",
           "Runs and DAGs stopped by a token or dollar cap, batch lines skipped (scope: run, "
           "run_cost, batch_cost, tenant_cost, dag_tenant_cost, batch_line).",
           ("scope",)),
    # approvals (reactq.shared.stores.approvals)
    Family("approval_decisions", "counter", "Approvals decided, by decision (expired included).",
           ("decision",)),
    Family("approval_wait_seconds", "histogram", "From an approval's request to its decision.",
           ("decision",), _APPROVAL_BUCKETS),
    # guardrails (hooks at run_start and answer): a block or a rewrite
    Family("guardrail_trips", "counter", "Guardrails that blocked a run or rewrote its answer.",
           ("guardrail", "point")),
    # webhooks (reactq.workers.webhooks)
    Family("webhook_attempts", "counter",
           "Webhook delivery attempts, by message type and outcome (delivered, retry, final, refused).",
           ("type", "outcome")),
    Family("webhook_deliveries", "counter", "Webhook messages that reached a final status.",
           ("type", "status")),
    Family("webhook_attempt_seconds", "histogram", "One webhook delivery attempt, connect to answer.",
           ("type",), _TOOL_BUCKETS),
)}


def label_field(values: Iterable[str]) -> str:
    return json.dumps([str(v) for v in values], separators=(",", ":"), ensure_ascii=False)


def bucket_of(family: Family, value: float) -> str:
    """The bucket an observation falls in (its upper bound as written, or ``+Inf``)."""
    for le in family.buckets:
        if value <= le:
            return bucket_label(le)
    return "+Inf"


def bucket_label(le: float) -> str:
    """A bucket bound as written in a hash field (``repr`` of the float, or ``+Inf``)."""
    return "+Inf" if le == float("inf") else repr(float(le))
