"""The door's stores, built once per process from settings: ``Stores.from_settings(settings)``
is the one place that turns settings into the objects every entry uses (the run, approval,
thread, DAG, schedule and active-run stores over one Redis client, and the catalog of what
the workers registered); each process (gateway, CLI, scheduler, worker) builds one bundle and
keeps it (``reactq.shared.service``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from redis import Redis

from reactq.shared.keys import Keys
from reactq.shared.redisconn import client as state_client
from reactq.shared.settings import Settings
from reactq.shared.stores.active import ActiveRuns
from reactq.shared.stores.approvals import ApprovalStore, approvals_of
from reactq.shared.stores.dags import DagStore
from reactq.shared.stores.toolsets import ToolSets
from reactq.shared.stores.runs import RunStore
from reactq.shared.stores.schedules import ScheduleStore
from reactq.shared.stores.threads import ThreadStore

__all__ = ["Stores"]


@dataclass
class Stores:
    """Every store the door writes, over one Redis client (built lazily, once)."""

    settings: Settings
    redis: Redis
    keys: Keys = field(init=False)

    def __post_init__(self) -> None:
        self.keys = Keys(self.settings.key_prefix)

    @classmethod
    def from_settings(cls, settings: Settings | None = None, *,
                      redis_client: Redis | None = None) -> Stores:
        """The bundle for ``settings`` (default: from the environment)."""
        s = settings or Settings()
        return cls(s, redis_client or state_client(s))

    @cached_property
    def runs(self) -> RunStore:
        s = self.settings
        return RunStore(self.redis, keys=self.keys, ttl_seconds=s.run_ttl_seconds,
                        maxlen=s.events_maxlen, due_seconds=s.due_seconds)

    @cached_property
    def approvals(self) -> ApprovalStore:
        return approvals_of(self.runs)

    @cached_property
    def threads(self) -> ThreadStore:
        return ThreadStore(self.redis, keys=self.keys, ttl_seconds=self.settings.run_ttl_seconds)

    @cached_property
    def dags(self) -> DagStore:
        s = self.settings
        return DagStore(self.redis, keys=self.keys, ttl_seconds=s.run_ttl_seconds,
                        maxlen=s.events_maxlen, due_seconds=s.due_seconds)

    @cached_property
    def schedules(self) -> ScheduleStore:
        return ScheduleStore(self.redis, self.keys)

    @cached_property
    def active(self) -> ActiveRuns:
        return ActiveRuns(self.redis, self.keys)

    # -- the catalog: what workers registered ---------------------------------------------
    def model_specs(self) -> list[dict[str, Any]]:
        """The models' public entries (name, roles, price, …) from the catalog, else from
        this process's registry."""
        raw = self.redis.hget(self.keys.catalog, "models")
        if raw:
            return list(json.loads(raw))
        from reactq.shared.llm.registry import load_registry

        return [s.model_dump(mode="json") for s in load_registry(self.settings).specs()]

    def catalog(self) -> tuple[list[str], list[str]]:
        """(tool names, model names) for validation at the door.

        Read from ``reactq:catalog``, which workers publish when they start, and the tools
        every live worker announces, so the door never imports tool code; before any worker
        has started, the same registries are loaded from this process's settings instead."""
        tools_raw, models_raw = self.redis.hmget(self.keys.catalog, "tools", "models")
        if tools_raw and models_raw:
            # Workers started with other REACTQ_TOOLS: any live worker's tool is a run's tool.
            live = ToolSets(self.redis, self.keys).live_names()
            names = [t["name"] for t in json.loads(tools_raw)]
            return names + sorted(live - set(names)), [m["name"] for m in json.loads(models_raw)]
        from reactq.shared.llm.registry import load_registry
        from reactq.shared.tools.loader import default_registry

        return default_registry(self.settings).names(), load_registry(self.settings).list_models()

    def own_tools(self, wanted: list[str] | None, known: list[str]) -> list[str]:
        """The names this process's own ``REACTQ_TOOLS`` loads, when a run asks for a tool no
        worker has announced yet: a script that set ``REACTQ_TOOLS`` for the worker it just
        started may submit before that worker is up (the run waits for it:
        ``workers/runs/handon.py``)."""
        if not wanted or not self.settings.tools or set(wanted) <= set(known):
            return []
        from reactq.shared.tools.loader import default_registry

        try:
            return default_registry(self.settings).names()
        except Exception:  # noqa: BLE001 - the catalog's refusal, naming the tool, is the answer
            return []
