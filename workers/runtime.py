"""Per-process (and per-thread) live objects of a worker: Redis, store, registries, loop.

Built lazily on first use, so importing ``reactq.workers.app`` stays cheap. LLM clients and the
asyncio event loop are per thread: async HTTP clients are bound to the loop that created
them, and the threads pool runs tasks on several threads at once.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Coroutine
from functools import cached_property
from typing import Any, TypeVar

import redis

from reactq.shared.engine.deps import DepsCache, model_for
from reactq.shared.engine.state import RunState
from reactq.shared.engine.deps import EngineDeps
from reactq.shared.flow.middleware import FlowControl, FlowScope, limited_registry
from reactq.shared.hooks import HookRegistry
from reactq.shared.keys import Keys
from reactq.shared.llm.base import LLM
from reactq.shared.llm.registry import ModelRegistry, load_registry
from reactq.shared.redisconn import broker_url, client as redis_client, is_cluster
from reactq.shared.settings import EngineConfig, Settings
from reactq.shared.stores.calls import CallLedger
from reactq.shared.stores.flow import FlowLimiter
from reactq.shared.errors import CostCapReached
from reactq.shared.stores.roundtrip import checked, defer, execute, failed, take
from reactq.shared.stores.approvals import ApprovalStore, approvals_of
from reactq.shared.stores.run_hash import cost_op, spend_op, spending_op
from reactq.shared.stores.runs import RunStore
from reactq.shared.stores.spend import BatchSpend, TenantSpend
from reactq.shared.tools.base import ToolRegistry
from reactq.shared.hooks.loader import default_hooks
from reactq.shared.tools.loader import default_registry
from reactq.workers.recovery.lease import Leases
from reactq.workers.metrics import Recorder, flow_recorder, metered_registry
from reactq.workers.otel import traced_registry

T = TypeVar("T")


class Runtime:
    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self.keys = Keys(self.settings.key_prefix)
        self._local = threading.local()
        self.worker_name = f"{socket.gethostname()}:{os.getpid()}"

    @cached_property
    def redis(self) -> redis.Redis:
        return redis_client(self.settings, health_check_interval=30)

    @cached_property
    def store(self) -> RunStore:
        return RunStore(self.redis, keys=self.keys, ttl_seconds=self.settings.run_ttl_seconds,
                        maxlen=self.settings.events_maxlen, due_seconds=self.settings.due_seconds)

    @cached_property
    def sends_in_commit(self) -> bool:
        """Whether a step's commit pushes the broker messages of what comes next itself
        (``workers/runs/step.py``): the broker is this very Redis server (no
        ``REACTQ_BROKER_URL``), one server, not a cluster."""
        s = self.settings
        return (not s.broker_url and not s.redis_cluster and not is_cluster(self.redis)
                and broker_url(s).startswith(("redis://", "rediss://")))

    @cached_property
    def calls(self) -> CallLedger:
        return CallLedger(self.store)

    @cached_property
    def approvals(self) -> ApprovalStore:
        return approvals_of(self.store)

    @cached_property
    def leases(self) -> Leases:
        return Leases(self.redis, self.keys, self.settings.lease_seconds, holder=self.worker_name)

    @cached_property
    def recorder(self) -> Recorder:
        return Recorder(self.redis, self.keys)

    @cached_property
    def flow(self) -> FlowControl:
        """Flow control for every model this worker calls (``reactq.shared.flow``): the
        cluster-wide limiter, its metrics, the dollar caps held before each call, and each
        call's spend in its run's record, its batch's spend (a batch with a dollar cap) and its
        tenant's day (sent with the step's next round trip: right after the call, its read of
        interrupts)."""
        r, keys = self.redis, self.keys

        def on_spend(run_id: str, tokens: int) -> None:
            defer(r, [spend_op(keys, run_id, tokens)])

        tenant_spend = TenantSpend(r, keys)
        batch_spend = BatchSpend(r, keys, self.settings.run_ttl_seconds)

        def on_cost(scope: FlowScope, cost: float) -> None:
            # The run's dollars, its batch's and its tenant's day (the reservations released),
            # deferred alike.
            assert scope.member is not None
            ops = [tenant_spend.settle_op(scope.tenant, scope.member, cost)]
            if scope.batch_cap is not None:
                ops.append(batch_spend.settle_op(scope.batch_cap[0], scope.member, cost))
            if cost and scope.run_id:
                ops.append(cost_op(keys, scope.run_id, cost))
            defer(r, ops)

        def on_reserve(scope: FlowScope, amount: float) -> None:
            run_id, budget = scope.run_id, scope.cost_budget_usd
            read = [spending_op(keys, run_id)] if run_id is not None and budget is not None else []
            # The settles this step still defers go first: the check sees every call before it.
            replies = execute(r, [*take(), *read])
            failed(replies[:len(replies) - len(read)])
            if read and budget is not None:
                cost = float(checked(replies[-1])[1] or 0.0)
                if cost >= budget:
                    raise CostCapReached("run", cost, budget)
            assert scope.member is not None
            batch = scope.batch_cap
            if batch is not None:
                got = batch_spend.reserve(batch[0], scope.member, amount, batch[1])
                if not got.ok:
                    raise CostCapReached("batch", got.spent + got.held, batch[1])
            if scope.cost_per_day_usd is not None:
                got = tenant_spend.reserve(scope.tenant, scope.member, amount, scope.cost_per_day_usd)
                if not got.ok:
                    if batch is not None:
                        batch_spend.release(batch[0], scope.member)  # the call is not made
                    raise CostCapReached("tenant", got.spent + got.held, scope.cost_per_day_usd)

        return FlowControl(limiter=FlowLimiter(r, keys), on_spend=on_spend, on_cost=on_cost, on_reserve=on_reserve,
                           on_event=flow_recorder(self.recorder),
                           completion_estimate=self.settings.flow_completion_estimate,
                           inline_wait_s=self.settings.flow_inline_wait_s)

    @cached_property
    def tools(self) -> ToolRegistry:
        return default_registry(self.settings)

    @cached_property
    def hooks(self) -> HookRegistry:
        return default_hooks(self.settings)

    @cached_property
    def config(self) -> EngineConfig:
        return EngineConfig()

    # -- per thread ---------------------------------------------------------------------
    @property
    def models(self) -> ModelRegistry:
        reg: ModelRegistry | None = getattr(self._local, "models", None)
        if reg is None:
            metered = metered_registry(load_registry(self.settings), self.recorder)
            # Flow control outside metering and tracing: waits are not call latency (reactq.shared.flow).
            reg = self._local.models = limited_registry(traced_registry(metered), self.flow)
        return reg

    def llm(self, name: str | None) -> LLM:
        """The model by registry name (a run's ``model``), else the default."""
        return model_for(self.models, name)

    def deps_for(self, state: RunState | None, model: str | None = None) -> EngineDeps:
        """The run's dependencies, built once per model for this thread (``DepsCache``)."""
        cache: DepsCache | None = getattr(self._local, "deps", None)
        if cache is None:
            cache = self._local.deps = DepsCache(self.models, self.tools, self.hooks, self.config)
        return cache.get(state.model if state else model)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on this thread's long-lived event loop."""
        loop = getattr(self._local, "loop", None)
        if loop is None or loop.is_closed():
            loop = self._local.loop = asyncio.new_event_loop()
        return loop.run_until_complete(coro)


_runtime: Runtime | None = None
_lock = threading.Lock()


def runtime() -> Runtime:
    global _runtime
    with _lock:
        if _runtime is None:
            _runtime = Runtime()
        return _runtime
