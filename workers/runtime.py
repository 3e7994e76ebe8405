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
from reactq.shared.stores.caps import CapLedger
from reactq.shared.stores.roundtrip import defer
from reactq.shared.service import Door, Stores
from reactq.shared.stores.approvals import ApprovalStore
from reactq.shared.stores.run_hash import spend_op
from reactq.shared.stores.runs import RunStore
from reactq.shared.tools.base import ToolRegistry
from reactq.shared.wire import RUNS_QUEUE
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
    def stores(self) -> Stores:
        """The process's stores (the one ``Stores`` every entry builds from settings)."""
        return Stores(self.settings, self.redis)

    @cached_property
    def store(self) -> RunStore:
        return self.stores.runs

    @cached_property
    def door(self) -> Door:
        """The door, for the runs a worker makes (a DAG's steps, a thread's follow-ups)."""
        from reactq.workers.app import app

        def send(task: str, args: list[Any], queue: str = RUNS_QUEUE, *, priority: int | None = None) -> None:
            options = {"priority": priority} if priority else {}
            app.send_task(task, args=args, queue=queue, argsrepr=repr(args), kwargsrepr="{}", **options)

        return Door(self.stores, send)

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
        return self.stores.approvals

    @cached_property
    def leases(self) -> Leases:
        return Leases(self.redis, self.keys, self.settings.lease_seconds, holder=self.worker_name)

    @cached_property
    def recorder(self) -> Recorder:
        return Recorder(self.redis, self.keys, known=self._registered_names,
                        flush_every_s=self.settings.metrics_flush_s)

    def _registered_names(self) -> dict[str, frozenset[str]]:
        """The names a metric's ``tool`` and ``model`` labels may carry (``Recorder``)."""
        return {"tool": frozenset(t.name for t in self.tools), "model": self._model_names}

    @cached_property
    def _model_names(self) -> frozenset[str]:
        return frozenset(load_registry(self.settings).list_models())

    @cached_property
    def flow(self) -> FlowControl:
        """Flow control for every model this worker calls (``reactq.shared.flow``): the
        cluster-wide limiter, its metrics, the dollar caps held before each call, and each
        call's spend in its run's record, its batch's spend (a batch with a dollar cap) and its
        tenant's day (sent with the step's next round trip: right after the call, its read of
        interrupts)."""
        r, keys = self.redis, self.keys
        caps = CapLedger(r, keys, self.settings.run_ttl_seconds)

        def on_spend(run_id: str, tokens: int) -> None:
            defer(r, [spend_op(keys, run_id, tokens)])

        def on_cost(scope: FlowScope, cost: float) -> None:
            assert scope.member is not None
            caps.settle(scope.caps, tenant=scope.tenant, member=scope.member, run_id=scope.run_id, cost=cost)

        def on_reserve(scope: FlowScope, amount: float) -> None:
            assert scope.member is not None
            caps.hold(scope.caps, tenant=scope.tenant, member=scope.member, run_id=scope.run_id, amount=amount)

        return FlowControl(limiter=FlowLimiter(r, keys), on_spend=on_spend, on_cost=on_cost, on_reserve=on_reserve,
                           on_event=flow_recorder(self.recorder),
                           completion_estimate=self.settings.flow_completion_estimate,
                           inline_wait_s=self.settings.flow_inline_wait_s)

    @cached_property
    def tools(self) -> ToolRegistry:
        return default_registry(self.settings)

    @cached_property
    def run_tools(self) -> ToolRegistry:
        """What runs are shown: this worker's tools, and stand-ins for the tools only other live
        workers offer (added as they appear: ``workers/runs/handon.py``). Calls run only where
        the tool is (``tools``)."""
        return ToolRegistry(self.tools, default_timeout=self.tools.default_timeout)

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
            cache = self._local.deps = DepsCache(self.models, self.run_tools, self.hooks, self.config)
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
