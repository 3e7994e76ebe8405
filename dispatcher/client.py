"""The dispatcher's Python API: submit runs, watch their events, talk to them.

    d = Dispatcher()                      # settings from the environment (no REACTQ_REDIS_URL: the embedded server)
    h = d.submit(RunRequest(query="what is 17*23?"))
    for stream_id, event in h.events():   # blocking; resumable with after=stream_id
        ...
    h.result(timeout=60)                  # the stored result once the run ended (NoWorker: none is up)

Tasks are enqueued by name (``send_task``), so this module imports no task or tool code.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from functools import cached_property
from typing import Any

import redis
from celery import Celery

from reactq.shared.engine.state import TERMINAL_STATUSES, RunState
from reactq.shared.errors import NoWorker, RunNotFound
from reactq.shared.events import Event
from reactq.shared.keys import Keys
from reactq.shared.redisconn import with_embedded
from reactq.shared.requests import RunRequest
from reactq.shared.service import Door, Origin, OriginKind, Stores
from reactq.shared.service.door import check_interrupt
from reactq.shared.settings import Settings
from reactq.shared.stores.approvals import ApprovalStore
from reactq.shared.stores.keys import Caller
from reactq.shared.stores.runs import RunStore
from reactq.shared.tenancy import DEFAULT_TENANT
from reactq.shared.wire import RUNS_QUEUE, celery_config


def follow_events(read: Callable[[str | None, int], list[tuple[str, Event]]], exists: Callable[[], object],
                  after: str | None, *, block_ms: int, until_done: bool,
                  timeout: float | None) -> Iterator[tuple[str, Event]]:
    """``(stream_id, event)`` from ``read(cursor, block_ms)`` after ``after``, waiting for new
    ones; stops after ``done`` (or at ``timeout`` seconds, or at once if not ``until_done``
    and nothing is new). ``exists`` raises once the run or DAG expired. Runs and DAGs alike."""
    deadline = None if timeout is None else time.monotonic() + timeout
    cursor = after
    while True:
        batch = read(cursor, block_ms)
        for stream_id, event in batch:
            cursor = stream_id
            yield stream_id, event
            if until_done and event.channel == "done":
                return
        if not batch:
            if not until_done or (deadline is not None and time.monotonic() > deadline):
                return
            exists()


#: ``RunHandle.result``'s default wait (seconds); ``timeout=None`` waits for as long as it takes.
RESULT_TIMEOUT = 600.0
#: After this long still ``queued``, ``result`` asks whether any worker is up at all.
PICKUP_CHECK = 30.0


class RunHandle:
    """One submitted run. Cheap to create from an id (``Dispatcher.handle``)."""

    #: Threads: the query went into this (active) run as a user interrupt; no run was made.
    injected: bool = False
    interrupt_id: str | None = None

    def __init__(self, dispatcher: Dispatcher, run_id: str, *, created: bool = True) -> None:
        self.d = dispatcher
        self.run_id = run_id
        self.created = created

    def __repr__(self) -> str:
        return f"RunHandle({self.run_id!r})"

    def status(self) -> dict[str, Any]:
        """``{run_id, status, created_at, updated_at, events, result}``."""
        return self.d.store.status(self.run_id)

    def events(self, after: str | None = None, *, block_ms: int = 1000,
               until_done: bool = True, timeout: float | None = None) -> Iterator[tuple[str, Event]]:
        """Yield ``(stream_id, event)`` from after ``after`` (None = the start), waiting for
        new ones; stops after the ``done`` event (or at ``timeout`` seconds)."""
        return follow_events(lambda cursor, block: self.d.store.read_events(self.run_id, cursor, block_ms=block),
                             lambda: self.d.store.load(self.run_id),  # RunNotFound once it expired
                             after, block_ms=block_ms, until_done=until_done, timeout=timeout)

    def interrupt(self, text: str) -> str:
        """Send a follow-up message; it reaches the run at its next drain point."""
        return self.d.door.interrupt_run(self.run_id, text)

    def cancel(self) -> None:
        """Ask the run to stop at its next step boundary (it ends ``cancelled``)."""
        self.d.door.cancel_run(self.run_id)

    def approvals(self) -> list[dict[str, Any]]:
        """The run's approvals (every status), oldest first."""
        self.d.store.status(self.run_id)  # RunNotFound for an unknown run
        return self.d.approvals.for_run(self.run_id)

    def decide(self, approval_id: str, decision: str, *, args_digest: str | None = None,
               args: dict[str, Any] | None = None, message: str | None = None,
               by: str | None = None) -> dict[str, Any]:
        """Decide a pending approval: ``approve``, ``edit`` (with ``args``), ``reject``
        (optional ``message`` for the model) or ``respond`` (``message`` is the call's answer).
        ``args_digest``: that of the arguments the decider saw (default: the pending
        request's, read now). Returns ``{approval_id, status}``; ``ApprovalConflict`` when it
        was decided already or the digest differs, ``RunNotFound`` for an unknown id."""
        return self.d.door.decide_approval(self.run_id, approval_id, decision, args_digest=args_digest,
                                           args=args, message=message, by=by)

    def result(self, timeout: float | None = RESULT_TIMEOUT, poll: float = 0.05, *,
               pickup_check: float | None = PICKUP_CHECK) -> dict[str, Any]:
        """Wait until the run ended; returns its stored result.

        ``NoWorker`` (a ``TimeoutError``) when the run is still ``queued`` after
        ``pickup_check`` seconds (or at ``timeout``) and no worker answers a ping: it would
        wait forever. ``TimeoutError`` naming the run's status after ``timeout`` seconds
        (``None``: no limit)."""
        started = time.monotonic()
        checked = pickup_check is None
        while True:
            st = self.status()
            if st["status"] in TERMINAL_STATUSES and st["result"] is not None:
                return {"run_id": self.run_id, **st["result"]}
            waited = time.monotonic() - started
            late = timeout is not None and waited > timeout
            if st["status"] == "queued" and (late or (not checked and waited > (pickup_check or 0))):
                checked = True
                self._no_worker_check(waited)
            if late:
                raise TimeoutError(f"run {self.run_id} still {st['status']} after {timeout}s")
            time.sleep(poll)

    def _no_worker_check(self, waited: float) -> None:
        """``NoWorker`` when no worker answers a ping (the run is still queued)."""
        if not self.d.workers_seen(timeout=1.0):
            raise NoWorker(f"run {self.run_id} is still queued after {waited:.0f}s and no worker answers: "
                           "start one ('reactq worker'), with the same REACTQ_REDIS_URL / REACTQ_BROKER_URL")


class Dispatcher:
    """Submits runs to the workers and reads them back from Redis, through the door
    (``reactq.shared.service``)."""

    def __init__(self, settings: Settings | None = None, *, redis_client: redis.Redis | None = None) -> None:
        """Without ``REACTQ_REDIS_URL`` (and no ``redis_client``): the embedded server the
        command line's local commands use, started if none is running (one machine needs nothing)."""
        settings = settings or Settings()
        self.settings = settings if redis_client is not None else with_embedded(settings)
        self.keys = Keys(self.settings.key_prefix)
        self._redis = redis_client

    @cached_property
    def stores(self) -> Stores:
        """The process's stores (one ``Stores.from_settings``)."""
        return Stores.from_settings(self.settings, redis_client=self._redis)

    @cached_property
    def door(self) -> Door:
        return Door(self.stores, self.send)

    @property
    def redis(self) -> redis.Redis:
        return self.stores.redis

    @property
    def store(self) -> RunStore:
        return self.stores.runs

    @property
    def approvals(self) -> ApprovalStore:
        return self.stores.approvals

    @cached_property
    def celery(self) -> Celery:
        app = Celery("reactq-dispatcher")
        app.conf.update(celery_config(self.settings))
        return app

    def model_specs(self) -> list[dict[str, Any]]:
        """The models' public entries (name, roles, price, …) from the catalog, else from
        this process's registry."""
        return self.stores.model_specs()

    def catalog(self) -> tuple[list[str], list[str]]:
        """(tool names, model names) for validation at the door (``Stores.catalog``)."""
        return self.stores.catalog()

    def send(self, task: str, args: list[Any], queue: str = RUNS_QUEUE, *, priority: int | None = None) -> None:
        options = {"priority": priority} if priority else {}
        self.celery.send_task(task, args=args, queue=queue, argsrepr=repr(args), kwargsrepr="{}", **options)

    def validate(self, request: RunRequest | dict[str, Any]) -> RunRequest:
        """Pydantic validation plus registry checks; raises with the field named."""
        return self.door.validate_run(request)

    def submit(self, request: RunRequest | dict[str, Any], *, run_id: str | None = None,
               batch_id: str | None = None, schedule_id: str | None = None,
               scheduled_for: str | None = None, tenant: str = DEFAULT_TENANT,
               batch_cost_budget_usd: float | None = None, caller: Caller | None = None,
               seed: RunState | None = None, forked_from: dict[str, Any] | None = None,
               replay: dict[str, Any] | None = None) -> RunHandle:
        """Admit, store and enqueue a run of ``tenant`` (``Door.create_run``). An
        ``idempotency_key`` the tenant used before returns the existing run and enqueues
        nothing. ``batch_id`` files the run under its HTTP batch in the run index (``GET
        /v1/runs?batch_id=``), ``schedule_id`` under its schedule (with ``scheduled_for``, the
        tick, on a tick's run). ``batch_cost_budget_usd``: the batch's dollar cap, which every
        call of the run is held against (with ``batch_id``). ``caller``: the key that asks
        (the gateway's), checked for the scopes the request needs. A fork
        (``dispatcher/fork.py``) starts from ``seed``, its first state, and records ``forked_from``.
        ``replay``: a ``ReplayPolicy`` (as JSON) whose recorded calls answer the run's calls (an
        eval's replay of an earlier eval, ``reactq.shared.engine.recorded``)."""
        kind: OriginKind = ("fork" if forked_from else "batch" if batch_id else "schedule" if schedule_id
                            else "run")
        origin = Origin(kind, batch_id=batch_id, batch_cost_budget_usd=batch_cost_budget_usd,
                        schedule_id=schedule_id, scheduled_for=scheduled_for, seed=seed,
                        forked_from=forked_from, replay=replay)
        got = self.door.create_run(request, tenant=tenant, caller=caller, origin=origin, run_id=run_id)
        handle = RunHandle(self, got.run_id, created=got.created)
        handle.injected, handle.interrupt_id = got.injected, got.interrupt_id
        return handle

    def handle(self, run_id: str) -> RunHandle:
        """A handle for an existing run (``RunNotFound`` if there is none)."""
        self.store.status(run_id)
        return RunHandle(self, run_id, created=False)

    def workers_seen(self, timeout: float = 1.0) -> list[str]:
        """Names of workers that answered a ping."""
        replies = self.celery.control.ping(timeout=timeout) or []
        return [name for r in replies for name in r]


__all__ = ["Dispatcher", "NoWorker", "RunHandle", "RunNotFound", "check_interrupt"]
