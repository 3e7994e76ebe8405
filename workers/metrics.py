"""Worker-side metrics: counters and histogram buckets written to Redis hashes.

Workers are many processes on many machines, so they do not serve metrics themselves:
each figure is added to a ``reactq:metrics:{family}`` hash with ``HINCRBY`` /
``HINCRBYFLOAT`` (one pipelined round trip per event, ≈ 0.1 ms), and the gateway's
``GET /metrics`` (``dispatcher/metrics.py``) reads the hashes and renders them in the
Prometheus text format. Nothing is ever reset: the values are monotonic counters, as
Prometheus expects, across worker restarts.

Hash layout (``FAMILIES`` is the schema both sides use):

* counter: field = JSON list of label values, e.g. ``["scripted","prompt"]`` → total.
* histogram: field = label values + the bucket's upper bound, e.g. ``["scripted","0.5"]`` →
  observations that fell in that bucket only (not cumulative; ``"+Inf"`` for the rest),
  and label values + ``"sum"`` → the sum of observed values. The reader accumulates.
* ``metrics:inflight``: run id → start time, for every run started and not yet ended.
* ``metrics:turns``: run id → start time of the run's current tool turn.

Recording never raises: a Redis hiccup costs a data point, never a run.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any

import redis

from reactq.shared.engine.next import Advance, CallLLM, Done, RunTools
from reactq.shared.engine.state import RunState, ToolOutcome
from reactq.shared.keys import Keys
from reactq.shared.llm.base import LLM, DelegatingLLM
from reactq.shared.llm.registry import ModelRegistry
from reactq.shared.metrics_schema import (  # noqa: F401  (re-exported for callers)
    FAMILIES, INFLIGHT, TURNS, Family, bucket_label, label_field,
)
from reactq.shared.models import ChatMessage, LLMResult, StreamChunk

if TYPE_CHECKING:
    from reactq.workers.runtime import Runtime

log = logging.getLogger(__name__)


def bucket_for(family: Family, value: float) -> str:
    for le in family.buckets:
        if value <= le:
            return bucket_label(le)
    return "+Inf"


class Batch:
    """Metric updates gathered for one pipelined round trip (``flush``)."""

    def __init__(self, recorder: Recorder) -> None:
        self.rec = recorder
        self.pipe = recorder.client.pipeline(transaction=False)
        self.size = 0

    def inc(self, family: str, labels: Iterable[str], amount: int = 1) -> Batch:
        self.pipe.hincrby(self.rec.key(family), label_field(labels), amount)
        self.size += 1
        return self

    def observe(self, family: str, labels: Iterable[str], value: float) -> Batch:
        fam = FAMILIES[family]
        values = [str(v) for v in labels]
        value = max(0.0, float(value))
        key = self.rec.key(family)
        self.pipe.hincrby(key, label_field([*values, bucket_for(fam, value)]), 1)
        self.pipe.hincrbyfloat(key, label_field([*values, "sum"]), value)
        self.size += 2
        return self

    def hset(self, name: str, field: str, value: str) -> Batch:
        self.pipe.hset(self.rec.run_key(name, field), field, value)
        self.size += 1
        return self

    def hdel(self, name: str, field: str) -> Batch:
        self.pipe.hdel(self.rec.run_key(name, field), field)
        self.size += 1
        return self

    def flush(self) -> None:
        if not self.size:
            return
        try:
            self.pipe.execute()
        except redis.RedisError as exc:
            log.warning("metrics not recorded: %s", exc)


class Recorder:
    """Writes metric updates for one Redis client and key prefix."""

    def __init__(self, client: redis.Redis, keys: Keys, owner: str | None = None) -> None:
        self.client = client
        self.keys = keys
        # Counters go to this process's shard: every worker increments a different hash, so
        # a Redis Cluster spreads them (the reader sums the shards).
        self.shard = Keys.metrics_shard(owner or f"{socket.gethostname()}:{os.getpid()}")

    def key(self, name: str) -> str:
        return self.keys.metrics(name, self.shard)

    def run_key(self, name: str, run_id: str) -> str:
        """The per-run hashes (in-flight runs, turn starts) shard by run id: any worker that
        takes a run's next step finds what the previous one wrote."""
        return self.keys.metrics(name, Keys.metrics_shard(run_id))

    def batch(self) -> Batch:
        return Batch(self)

    # -- LLM ---------------------------------------------------------------------------
    def llm_call(self, model: str, seconds: float, usage: dict[str, Any] | None,
                 error: BaseException | None = None) -> None:
        b = self.batch().observe("llm_call_seconds", [model], seconds)
        if error is not None:
            b.inc("llm_errors", [model, error_code(error)])
        for kind in ("prompt", "completion"):
            n = int((usage or {}).get(f"{kind}_tokens") or 0)
            if n:
                b.inc("llm_tokens", [model, kind], n)
        b.flush()

    # -- tools -------------------------------------------------------------------------
    def tool(self, outcome: ToolOutcome) -> None:
        b = self.batch()
        if outcome.ended_at and outcome.started_at:
            b.observe("tool_call_seconds", [outcome.tool_name], outcome.ended_at - outcome.started_at)
        kind = ("blocked" if outcome.blocked else "uncertain" if outcome.uncertain
                else "error" if outcome.error else None)
        if kind:
            b.inc("tool_errors", [outcome.tool_name, kind])
        b.flush()


def error_code(exc: BaseException) -> str:
    """``"429"`` for an HTTP failure, else the exception's type (``LLMError``, ``StreamIncomplete``)."""
    status = getattr(exc, "status_code", None)
    return str(status) if status is not None else type(exc).__name__


# -- run lifecycle (called by workers/drive.py after a step was committed) -------------

def on_commit(rt: Runtime, state: RunState, step_no: int, adv: Advance,
              began: float | None = None) -> None:
    """Record what the step just committed (``step_no`` before it) means for the metrics,
    from the step that ran (``adv.step``) and what comes next (``adv.next``):

    * the run's first step (``step_no == 0``) ⇒ run started (by resolved mode), in flight;
    * an LLM turn (``began`` = when it started) that leads to its tools ⇒ the turn goes on
      until its fan-in; one that leads anywhere else ⇒ a turn of ``now - began``;
    * a fan-in (``RunTools`` ran) ⇒ the turn started by the LLM step ends;
    * ``Done`` next ⇒ run ended (status, mode), no longer in flight.

    Commits are compare-and-set, so each step is counted once however often it was delivered.
    """
    try:
        _on_commit(Recorder(rt.redis, rt.keys), state, step_no, adv, began)
    except redis.RedisError as exc:  # never let metrics fail a step
        log.warning("metrics not recorded for run %s: %s", state.run_id, exc)


def _on_commit(rec: Recorder, state: RunState, step_no: int, adv: Advance,
               began: float | None) -> None:
    now = time.time()
    rid = state.run_id
    turn_labels = [state.model, state.mode]
    b = rec.batch()
    if step_no == 0:
        b.inc("runs_started", [state.mode])
        b.hset(INFLIGHT, rid, f"{state.started_at or now:.3f}")
    match adv.step:
        case CallLLM() if began is not None:
            if isinstance(adv.next, RunTools):
                b.hset(TURNS, rid, f"{began:.6f}")
            else:
                b.observe("turn_seconds", turn_labels, now - began)
        case RunTools():
            raw = rec.client.hget(rec.run_key(TURNS, rid), rid)
            if raw:
                b.observe("turn_seconds", turn_labels, now - float(raw))
            b.hdel(TURNS, rid)
        case _:
            pass
    if isinstance(adv.next, Done):
        result = adv.next.result
        if not isinstance(adv.step, RunTools):
            b.hdel(TURNS, rid)
        b.inc("runs_ended", [result.status, result.mode])
        if state.started_at:
            b.observe("run_seconds", [result.status], (state.ended_at or now) - state.started_at)
        b.hdel(INFLIGHT, rid)
    b.flush()


# -- a metering wrapper for the models a worker uses -----------------------------------

class MeteredLLM(DelegatingLLM):
    """An ``LLM`` that records each call's latency, errors and tokens, then delegates
    (``DelegatingLLM``: the wrapped model's name, abilities and other attributes)."""

    def __init__(self, inner: LLM, recorder: Recorder) -> None:
        super().__init__(inner)
        self._recorder = recorder

    async def chat(self, messages: list[ChatMessage], **kwargs: Any) -> LLMResult:
        started = time.perf_counter()
        try:
            result = await self._inner.chat(messages, **kwargs)
        except Exception as exc:
            self._recorder.llm_call(self.name, time.perf_counter() - started, None, exc)
            raise
        self._recorder.llm_call(self.name, time.perf_counter() - started, result.usage)
        return result

    def stream_chat(self, messages: list[ChatMessage], **kwargs: Any) -> AsyncIterator[StreamChunk]:
        started = time.perf_counter()
        try:
            inner = self._inner.stream_chat(messages, **kwargs)
        except Exception as exc:
            self._recorder.llm_call(self.name, time.perf_counter() - started, None, exc)
            raise
        return self._metered(inner, started)

    async def _metered(self, inner: AsyncIterator[StreamChunk], started: float) -> AsyncIterator[StreamChunk]:
        usage: dict[str, Any] | None = None
        error: BaseException | None = None
        try:
            async for chunk in inner:
                if chunk.usage:
                    usage = chunk.usage
                yield chunk
        except Exception as exc:
            error = exc
            raise
        finally:
            self._recorder.llm_call(self.name, time.perf_counter() - started, usage, error)


def metered_registry(registry: ModelRegistry, recorder: Recorder) -> ModelRegistry:
    """A copy of ``registry`` whose models are ``MeteredLLM``s (same names, roles, specs)."""
    out = ModelRegistry()
    for name in registry.list_models():
        out.register(name, MeteredLLM(registry.get(name), recorder), registry.roles_of(name),
                     spec=registry.spec_of(name))
    return out


def record_tool(rt: Runtime, outcome: ToolOutcome) -> None:
    """A tool call this worker just executed (called where ``toolcall.tool`` records it)."""
    Recorder(rt.redis, rt.keys).tool(outcome)
