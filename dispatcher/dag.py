"""The DAG door's Python API: submit a goal or a plan, watch it, talk to it.

    d = DagDispatcher()                                   # settings from the environment
    h = d.submit(DagRequest(goal="…", steps=[…]))         # or just a goal: the planner plans
    for stream_id, event in h.events():                   # phase, step_progress, answer, done
        ...
    h.result(timeout=300)                                 # {answer, achieved, confidence, …}
    h.status()                                            # GET /v1/dags/{id}

Bad input is refused here, before anything is stored or enqueued (``RequestError`` naming
the field): unknown tools or model, repeated step ids, a cycle (naming the steps on it), a
plan above ``REACTQ_DAG_MAX_STEPS``. Tasks are sent by name; no worker code is imported.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import redis

from reactq.dispatcher.client import Dispatcher, follow_events
from reactq.shared.dag.config import DagConfig
from reactq.shared.dag.state import TERMINAL_DAG_STATUSES
from reactq.shared.errors import RequestError
from reactq.shared.events import Event
from reactq.shared.requests import DagRequest
from reactq.shared.service.admission import check_dag, check_plan
from reactq.shared.service.door import check_interrupt
from reactq.shared.service.ops import cancel_run
from reactq.shared.settings import Settings
from reactq.shared.stores.dags import DagNotFound, DagStore, public_view
from reactq.shared.tenancy import DEFAULT_TENANT
from reactq.shared.wire import DAG_ADVANCE

__all__ = ["DagDispatcher", "DagHandle", "DagNotFound", "check_plan"]


class DagHandle:
    """One submitted DAG. Cheap to create from an id (``DagDispatcher.handle``)."""

    def __init__(self, dispatcher: DagDispatcher, dag_id: str, *, created: bool = True) -> None:
        self.d = dispatcher
        self.dag_id = dag_id
        self.created = created

    def __repr__(self) -> str:
        return f"DagHandle({self.dag_id!r})"

    def status(self) -> dict[str, Any]:
        """``GET /v1/dags/{id}``: status, phase, round, steps (status, run_id, result), answer."""
        return public_view(self.d.store.load(self.dag_id))

    def events(self, after: str | None = None, *, block_ms: int = 1000, until_done: bool = True,
               timeout: float | None = None) -> Iterator[tuple[str, Event]]:
        """Yield ``(stream_id, event)`` after ``after`` (None = the start), waiting for new
        ones; stops after ``done`` (or at ``timeout`` seconds, or at once if not
        ``until_done`` and nothing is new)."""
        return follow_events(lambda cursor, block: self.d.store.read_events(self.dag_id, cursor, block_ms=block),
                             lambda: self.d.store.load(self.dag_id),  # DagNotFound once it expired
                             after, block_ms=block_ms, until_done=until_done, timeout=timeout)

    def result(self, timeout: float | None = None, poll: float = 0.1) -> dict[str, Any]:
        """Wait until the DAG ended; its ``done`` payload. ``TimeoutError`` otherwise."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            rec = self.d.store.load(self.dag_id)
            if rec.status in TERMINAL_DAG_STATUSES and rec.result is not None:
                return {"dag_id": self.dag_id, **rec.result}
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"DAG {self.dag_id} still {rec.status} after {timeout}s")
            time.sleep(poll)

    def cancel(self) -> None:
        """Cancel: running steps' child runs are cancelled, pending steps skipped."""
        rec = self.d.store.load(self.dag_id)
        if rec.status in TERMINAL_DAG_STATUSES:
            return
        self.d.store.request_cancel(self.dag_id)
        # The running steps' child runs stop now, not when a DAG worker gets to the advance
        # task: under load that took longer than a short step, which then ended `succeeded`.
        for step in rec.state.steps if rec.state is not None else []:
            if step.status == "running" and step.run_id:
                # Not created yet: its StartRun sees the DAG's cancel flag.
                cancel_run(self.d.runs.store, self.d.runs.send, step.run_id)
        self.d.runs.send(DAG_ADVANCE, [self.dag_id, None])

    def interrupt(self, text: str) -> str:
        """A follow-up: steps not yet started are skipped and the DAG re-plans with it."""
        s = self.d.settings
        check_interrupt(text, s.max_interrupt_chars)
        if self.d.store.load(self.dag_id).status in TERMINAL_DAG_STATUSES:
            raise RequestError(f"DAG {self.dag_id} has already ended", field="dag_id")
        msg_id = self.d.store.add_interrupt(self.dag_id, text, limit=s.max_interrupts)
        self.d.runs.send(DAG_ADVANCE, [self.dag_id, None])
        return msg_id


class DagDispatcher:
    """Submits DAGs to the workers and reads them back from Redis."""

    def __init__(self, settings: Settings | None = None, *, redis_client: redis.Redis | None = None,
                 config: DagConfig | None = None, runs: Dispatcher | None = None) -> None:
        # ``runs``: a dispatcher whose stores this one shares (one bundle per process).
        # Without REACTQ_REDIS_URL: the embedded server's (``Dispatcher``).
        self.runs = runs or Dispatcher(settings, redis_client=redis_client)
        self.settings = self.runs.settings
        self.config = config or DagConfig()

    @property
    def store(self) -> DagStore:
        return self.runs.stores.dags

    def validate(self, request: DagRequest | dict[str, Any], *, tenant: str = DEFAULT_TENANT) -> DagRequest:
        """Pydantic validation, registry checks, plan checks and the dollar-cap rule over every
        model the DAG may call; raises naming the field."""
        req = request if isinstance(request, DagRequest) else DagRequest.model_validate(request)
        check_dag(self.runs.stores, req, tenant)
        check_plan(req, max_steps=self.config.max_steps)
        return req

    def submit(self, request: DagRequest | dict[str, Any], *, dag_id: str | None = None,
               tenant: str = DEFAULT_TENANT) -> DagHandle:
        """Check, store and enqueue a DAG of ``tenant`` (``Door.create_dag``; its child runs
        are the tenant's too, each admitted by the door as it starts). An
        ``idempotency_key`` the tenant used before returns the existing DAG and enqueues
        nothing."""
        did, created = self.runs.door.create_dag(request, tenant=tenant, dag_id=dag_id,
                                                 max_steps=self.config.max_steps)
        return DagHandle(self, did, created=created)

    def handle(self, dag_id: str) -> DagHandle:
        """A handle for an existing DAG (``DagNotFound`` if there is none)."""
        self.store.load(dag_id)
        return DagHandle(self, dag_id, created=False)
