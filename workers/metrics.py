"""Worker-side metrics: counters and histogram buckets written to Redis hashes.

Workers are many processes on many machines, so they do not serve metrics themselves:
each figure is added to a ``reactq:metrics:{family}`` hash with ``HINCRBY`` /
``HINCRBYFLOAT`` — a commit carries the step's counts (runs started and ended, in flight) and
applies them only if it wins; the rest (an LLM call's, flow control's, the durations of turns
and tool calls once their commit won) are summed in the process (``Sums``) and written once a
second by a thread of their own — and the gateway's
``GET /metrics`` (``dispatcher/http/metrics.py``) reads the hashes and renders them in the
Prometheus text format. Nothing is ever reset: the values are monotonic counters, as
Prometheus expects, across worker restarts.

Hash layout (``FAMILIES`` is the schema both sides use):

* counter: field = JSON list of label values, e.g. ``["scripted","prompt"]`` → total.
* histogram: field = label values + the bucket's upper bound, e.g. ``["scripted","0.5"]`` →
  observations that fell in that bucket only (not cumulative; ``"+Inf"`` for the rest),
  and label values + ``"sum"`` → the sum of observed values. The reader accumulates.
* ``metrics:inflight``: run id → start time, for every run started and not yet ended.
* A tool turn's duration is measured from the run hash's ``turn_began`` (when the turn's
  LLM call began), so no metrics key holds turns in flight.

Recording never raises: a Redis hiccup costs a data point, never a run.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import redis

from reactq.shared.engine.next import Advance, CallLLM, Done, RunTools
from reactq.shared.engine.state import RunState, ToolOutcome
from reactq.shared.flow.middleware import current_scope
from reactq.shared.keys import Keys
from reactq.shared.llm.base import LLM, DelegatingLLM
from reactq.shared.llm.registry import ModelRegistry
from reactq.shared.observe.metrics_schema import (  # noqa: F401  (re-exported for callers)
    FAMILIES, INFLIGHT, Family, bucket_label, label_field,
)
from reactq.shared.models import ChatMessage, LLMResult, StreamChunk
from reactq.shared.stores.roundtrip import Op, defer, execute, failed

log = logging.getLogger(__name__)


def bucket_for(family: Family, value: float) -> str:
    for le in family.buckets:
        if value <= le:
            return bucket_label(le)
    return "+Inf"


class Batch:
    """Metric updates gathered for one round trip: ``flush`` sends them with the running
    step's next round trip (``reactq.shared.stores.roundtrip.defer``), or at once outside a step;
    ``ops`` hands them to a commit that applies them only if it wins."""

    def __init__(self, recorder: Recorder) -> None:
        self.rec = recorder
        self.ops: list[Op] = []

    @property
    def size(self) -> int:
        return len(self.ops)

    def inc(self, family: str, labels: Iterable[str], amount: int = 1) -> Batch:
        self.ops.append(Op(("HINCRBY", self.rec.key(family), label_field(self.rec.labels(family, labels)),
                            amount)))
        return self

    def add(self, family: str, labels: Iterable[str], amount: float) -> Batch:
        """A float counter (dollars)."""
        self.ops.append(Op(("HINCRBYFLOAT", self.rec.key(family), label_field(self.rec.labels(family, labels)),
                            repr(amount))))
        return self

    def observe(self, family: str, labels: Iterable[str], value: float) -> Batch:
        fam = FAMILIES[family]
        values = self.rec.labels(family, labels)
        value = max(0.0, float(value))
        key = self.rec.key(family)
        self.ops.append(Op(("HINCRBY", key, label_field([*values, bucket_for(fam, value)]), 1)))
        self.ops.append(Op(("HINCRBYFLOAT", key, label_field([*values, "sum"]), repr(value))))
        return self

    def hset(self, name: str, field: str, value: str) -> Batch:
        self.ops.append(Op(("HSET", self.rec.run_key(name, field), field, value)))
        return self

    def hdel(self, name: str, field: str) -> Batch:
        self.ops.append(Op(("HDEL", self.rec.run_key(name, field), field)))
        return self

    def send(self) -> None:
        """With the step's next round trip, not summed (a rare figure, such as a budget stop)."""
        if self.ops:
            defer(self.rec.client, self.ops)
            self.ops = []

    def flush(self) -> None:
        """Best-effort figures (an LLM call's, flow control's): into the process's running
        sums (``Sums``), which go out once a second; a commit's own go with it (``ops``)."""
        if self.ops:
            self.rec.sums.add(self.ops)
            self.ops = []


class Sums:
    """The best-effort counters of one process, summed in memory and written every
    ``every_s`` (one ``HINCRBY`` per field, not one per call) by a thread of their own, and at
    exit. A crash loses at most ``every_s`` of them, as it loses a step's deferred writes.

    They never ride on a step's round trip: what a step defers goes into its own box, and a
    write deferred from a context that outlived its step (an async generator finalized late)
    would take every thread's sums down with that box."""

    def __init__(self, client: redis.Redis, every_s: float) -> None:
        self.client = client
        self.every_s = every_s
        self._sums: dict[tuple[str, str, str], float] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, ops: list[Op]) -> None:
        if self.every_s <= 0:  # summing off: with the step's next round trip, as they come
            defer(self.client, ops)
            return
        now: list[Op] = []
        with self._lock:
            for op in ops:
                cmd, key, field, *value = op.args
                if cmd in ("HINCRBY", "HINCRBYFLOAT"):
                    self._sums[(cmd, key, field)] = self._sums.get((cmd, key, field), 0) + float(value[0])
                else:
                    now.append(op)  # gauges (HSET / HDEL) are not sums
            self._start()
        if now:
            defer(self.client, now)

    def take(self) -> list[Op]:
        """The sums as commands (they leave the process)."""
        with self._lock:
            sums, self._sums = self._sums, {}
        return [Op((cmd, key, field, int(v) if cmd == "HINCRBY" else repr(v)))
                for (cmd, key, field), v in sums.items()]

    def flush(self) -> None:
        """Send what is summed now (a worker's exit, the background thread)."""
        due = self.take()
        if due:
            try:
                failed(execute(self.client, due))
            except redis.RedisError as exc:
                log.warning("metrics not sent: %s", exc)

    def _start(self) -> None:
        if self._thread is None:  # the first sum: what is left at exit goes out then
            atexit.register(self.flush)
        if self._thread is None or not self._thread.is_alive():  # none yet, or a forked child's
            self._thread = threading.Thread(target=self._run, daemon=True, name="reactq-metrics")
            self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(self.every_s)
            self.flush()


#: The value of a ``tool`` or ``model`` label that is not a registered name.
UNKNOWN = "unknown"


class Recorder:
    """Writes metric updates for one Redis client and key prefix.

    ``known``: the registered names per label (``{"tool": …, "model": …}``), asked again
    when a value is not among them (a tool registered since). A ``tool`` or ``model`` label
    carries only those names, anything else ``unknown``: a name the model invented (it may
    carry anything it read) never becomes a label value, and the label sets stay bounded."""

    def __init__(self, client: redis.Redis, keys: Keys, owner: str | None = None,
                 known: Callable[[], dict[str, frozenset[str]]] | None = None,
                 flush_every_s: float = 1.0) -> None:
        self.client = client
        self.keys = keys
        self.sums = Sums(client, flush_every_s)
        self._known_fn = known
        self._known: dict[str, frozenset[str]] | None = None
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

    def labels(self, family: str, values: Iterable[Any]) -> list[str]:
        """``values`` as written: a ``tool`` or ``model`` label that is not a registered name
        is ``unknown``."""
        out = [str(v) for v in values]
        if self._known_fn is None:
            return out
        for i, name in enumerate(FAMILIES[family].labels[:len(out)]):
            if name in ("tool", "model") and not self._registered(name, out[i]):
                out[i] = UNKNOWN
        return out

    def _registered(self, label: str, value: str) -> bool:
        assert self._known_fn is not None
        if self._known is None or value not in self._known.get(label, frozenset()):
            self._known = self._known_fn()  # registries only grow: a miss asks again
        return value in self._known.get(label, frozenset())

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
        cost = float((usage or {}).get("cost_usd") or 0.0)
        if cost:
            b.add("cost_usd", [model, current_scope().tenant], cost)
        b.flush()

    # -- tools -------------------------------------------------------------------------
    def tool(self, outcome: ToolOutcome) -> None:
        b = self.batch()
        b.ops = tool_ops(self, outcome) + tool_observations(self, outcome)
        b.flush()


def tool_ops(rec: Recorder, outcome: ToolOutcome) -> list[Op]:
    """A tool call's metrics, for the round trip that records its outcome."""
    b = rec.batch()
    if outcome.reused:  # answered from a recorded ledger: no execution to time
        b.inc("tool_calls_reused", [outcome.tool_name])
        return b.ops
    kind = ("blocked" if outcome.blocked else "uncertain" if outcome.uncertain
            else "error" if outcome.error else None)
    if kind:
        b.inc("tool_errors", [outcome.tool_name, kind])
    return b.ops


def tool_observations(rec: Recorder, outcome: ToolOutcome) -> list[Op]:
    """How long the call took: summed by the worker (``Sums``) once the outcome is the call's."""
    b = rec.batch()
    if not outcome.reused and outcome.ended_at and outcome.started_at:
        b.observe("tool_call_seconds", [outcome.tool_name], outcome.ended_at - outcome.started_at)
    return b.ops


def error_code(exc: BaseException) -> str:
    """``"429"`` for an HTTP failure, else the exception's type (``LLMError``, ``StreamIncomplete``)."""
    status = getattr(exc, "status_code", None)
    return str(status) if status is not None else type(exc).__name__


# -- run lifecycle (what workers/runs/drive.py's commits carry) -------------------------------

def commit_ops(rec: Recorder, state: RunState, step_no: int, adv: Advance) -> list[Op]:
    """What committing this step (``step_no`` before it) means for the metrics, from the
    step that ran (``adv.step``) and what comes next (``adv.next``); the commit applies them
    only if it wins (compare-and-set), so each step is counted once however often it was
    delivered:

    * the run's first step (``step_no == 0``) ⇒ run started (by resolved mode), in flight;
    * ``Done`` next ⇒ run ended (status, mode), no longer in flight.

    The turn it ends, if any, is ``turn_observations``.
    """
    now = time.time()
    rid = state.run_id
    b = rec.batch()
    if step_no == 0:
        b.inc("runs_started", [state.mode])
        b.hset(INFLIGHT, rid, f"{state.started_at or now:.3f}")
    if isinstance(adv.next, Done):
        result = adv.next.result
        b.inc("runs_ended", [result.status, result.mode])
        for e in adv.events:  # guardrails decide only in steps that end the run
            if e.channel == "guardrail" and e.data.get("decision") != "allowed":
                b.inc("guardrail_trips", [str(e.data.get("guardrail")), str(e.data.get("point"))])
        if state.started_at:
            b.observe("run_seconds", [result.status], (state.ended_at or now) - state.started_at)
        b.hdel(INFLIGHT, rid)
    return b.ops


def turn_observations(rec: Recorder, state: RunState, adv: Advance, began: float | None = None,
                      turn_began: float | None = None) -> list[Op]:
    """The turn this step ends, summed by the worker (``Sums``) once its commit won:

    * an LLM turn (``began`` = when it started) that leads anywhere but to its tools ⇒ a
      turn of ``now - began`` (one that leads to its tools goes on until its fan-in: the
      commit keeps ``began`` in the run hash, and the fan-in's load reads it back);
    * a fan-in (``RunTools`` ran; ``turn_began`` as loaded) ⇒ that turn ends.
    """
    b = rec.batch()
    labels = [state.model, state.mode]
    match adv.step:
        case CallLLM() if began is not None and not isinstance(adv.next, RunTools):
            b.observe("turn_seconds", labels, time.time() - began)
        case RunTools() if turn_began is not None:
            b.observe("turn_seconds", labels, time.time() - turn_began)
        case _:
            pass
    return b.ops


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


def record_tool(rec: Recorder, outcome: ToolOutcome) -> list[Op]:
    """A tool call this worker just executed: its metrics, for ``toolcall`` to send with the
    round trip that records the outcome (applied only if that outcome is the call's)."""
    return tool_ops(rec, outcome)


# -- flow control (families in ``shared/observe/metrics_schema.py``) --------------------------

def flow_recorder(rec: Recorder) -> Callable[[str, dict[str, Any]], None]:
    """Flow control's ``on_event``: waits, provider 429s, reserved vs reported tokens."""

    def on_event(kind: str, f: dict[str, Any]) -> None:
        b = rec.batch()
        if kind == "wait":
            b.observe("flow_wait_seconds", [f["model"], f["priority"]], float(f["seconds"]))
        elif kind == "provider_429":
            b.inc("flow_provider_429", [f["model"], str(f["status"])])
        elif kind == "settle":
            b.inc("flow_tokens", [f["model"], "reserved"], int(f["reserved"]))
            b.inc("flow_tokens", [f["model"], "actual"], int(f["actual"]))
        b.flush()

    return on_event


def budget_stop(rec: Recorder, scope: str, n: int = 1) -> None:
    """Runs stopped by their token budget (``scope`` run), batch lines skipped."""
    rec.batch().inc("flow_budget_stops", [scope], n).send()
