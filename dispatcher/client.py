"""The dispatcher's Python API: submit runs, watch their events, talk to them.

    d = Dispatcher()                      # settings from the environment (no REACTQ_REDIS_URL: the embedded server)
    h = d.submit(RunRequest(query="what is 17*23?"))
    for stream_id, event in h.events():   # blocking; resumable with after=stream_id
        ...
    h.result(timeout=60)                  # the stored result once the run ended (NoWorker: none is up)

Tasks are enqueued by name (``send_task``), so this module imports no task or tool code.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from functools import cached_property
from typing import Any

import redis
from celery import Celery

from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.errors import NoWorker, RequestError, RunNotFound, TooManyRequests
from reactq.shared.events import Event
from reactq.shared.keys import Keys
from reactq.shared.redisconn import broker_url
from reactq.shared.redisconn import client as state_client
from reactq.shared.redisconn import with_embedded
from reactq.shared.requests import RunRequest, check_priced, check_run_request
from reactq.shared.settings import Settings
from reactq.shared.stores.approvals import ApprovalStore, approvals_of
from reactq.shared.stores.runs import RunStore
from reactq.shared.stores.toolsets import ToolSets
from reactq.shared.tenancy import DEFAULT_TENANT
from reactq.dispatcher.approvals import decide
from reactq.dispatcher.threads import submit_on_thread
from reactq.dispatcher.webhooks import check_webhook
from reactq.shared.wire import ITERATE, RUNS_QUEUE, celery_config, message_priorities
from reactq.shared.stores.idempotency import idempotent_id


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


def check_interrupt(text: str, max_chars: int) -> None:
    """A follow-up's content: not blank, at most ``REACTQ_MAX_INTERRUPT_CHARS``."""
    if not text.strip():
        raise RequestError("content must not be empty", field="content")
    if len(text) > max_chars:
        raise RequestError(f"content: at most {max_chars} characters (REACTQ_MAX_INTERRUPT_CHARS), "
                           f"got {len(text)}", field="content")


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
        s = self.d.settings
        check_interrupt(text, s.max_interrupt_chars)
        if self.status()["status"] in TERMINAL_STATUSES:
            raise RequestError(f"run {self.run_id} has already ended", field="run_id")
        return self.d.store.add_interrupt(self.run_id, text, limit=s.max_interrupts)

    def cancel(self) -> None:
        """Ask the run to stop at its next step boundary (it ends ``cancelled``)."""
        rec = self.d.store.load(self.run_id)
        if rec.status in TERMINAL_STATUSES:
            return
        self.d.store.request_cancel(self.run_id)
        # Nudge: a run waiting on slow tools ends now instead of when they report.
        self.d.send(ITERATE, [self.run_id, rec.step_no])

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
        return decide(self.d, self.run_id, approval_id, decision, args_digest=args_digest, args=args,
                      message=message, by=by)

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
    """Submits runs to the workers and reads them back from Redis."""

    def __init__(self, settings: Settings | None = None, *, redis_client: redis.Redis | None = None) -> None:
        """Without ``REACTQ_REDIS_URL`` (and no ``redis_client``): the embedded server the
        command line's local commands use, started if none is running (one machine needs nothing)."""
        settings = settings or Settings()
        self.settings = settings if redis_client is not None else with_embedded(settings)
        self.keys = Keys(self.settings.key_prefix)
        self._redis = redis_client

    @cached_property
    def redis(self) -> redis.Redis:
        return self._redis or state_client(self.settings)

    @cached_property
    def store(self) -> RunStore:
        return RunStore(self.redis, keys=self.keys, ttl_seconds=self.settings.run_ttl_seconds,
                        maxlen=self.settings.events_maxlen, due_seconds=self.settings.due_seconds)

    @cached_property
    def approvals(self) -> ApprovalStore:
        return approvals_of(self.store)

    @cached_property
    def celery(self) -> Celery:
        app = Celery("reactq-dispatcher")
        app.conf.update(celery_config(self.settings))
        return app

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
        every live worker announces, so the door never imports tool code; before any worker has started, the same registries are
        loaded from this process's settings instead.
        """
        tools_raw, models_raw = self.redis.hmget(self.keys.catalog, "tools", "models")
        if tools_raw and models_raw:
            # Workers started with other REACTQ_TOOLS: any live worker's tool is a run's tool.
            live = ToolSets(self.redis, self.keys).live_names()
            names = [t["name"] for t in json.loads(tools_raw)]
            return (names + sorted(live - set(names)), [m["name"] for m in json.loads(models_raw)])
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

    def send(self, task: str, args: list[Any], queue: str = RUNS_QUEUE, *, priority: int | None = None) -> None:
        options = {"priority": priority} if priority else {}
        self.celery.send_task(task, args=args, queue=queue, argsrepr=repr(args), kwargsrepr="{}", **options)

    def validate(self, request: RunRequest | dict[str, Any]) -> RunRequest:
        """Pydantic validation plus registry checks; raises with the field named."""
        req = request if isinstance(request, RunRequest) else RunRequest.model_validate(request)
        tools, models = self.catalog()
        check_run_request(req, tools=tools + self.own_tools(req.tools, tools), models=models)
        if req.cost_budget_usd is not None:
            check_priced("cost_budget_usd", req.model, self.model_specs())
        check_webhook(req.webhook, self.settings)
        return req

    def submit(self, request: RunRequest | dict[str, Any], *, run_id: str | None = None,
               batch_id: str | None = None, schedule_id: str | None = None,
               scheduled_for: str | None = None, tenant: str = DEFAULT_TENANT,
               batch_cost_budget_usd: float | None = None) -> RunHandle:
        """Validate, store and enqueue a run of ``tenant``. An ``idempotency_key`` the
        tenant used before returns the existing run and enqueues nothing. ``batch_id`` files
        the run under its HTTP batch in the run index (``GET /v1/runs?batch_id=``),
        ``schedule_id`` under its schedule (with ``scheduled_for``, the tick, on a tick's run).
        ``batch_cost_budget_usd``: the batch's dollar cap, which every call of the run is held
        against (with ``batch_id``)."""
        req = self.validate(request)
        self.check_tenant_cap(req.model, tenant)
        if req.thread_id is not None:
            sub = submit_on_thread(self, req, run_id, tenant=tenant)
            handle = RunHandle(self, sub.run_id, created=sub.created)
            handle.injected, handle.interrupt_id = sub.injected, sub.interrupt_id
            return handle
        if run_id is None:  # a key names one id: a retry after a kill finds what it wrote
            run_id = (uuid.uuid4().hex if req.idempotency_key is None
                      else idempotent_id(req.idempotency_key, tenant=tenant))
        self.admit(tenant, run_id)
        rid, created = self.store.create(run_id, req.model_dump(mode="json"),
                                         idempotency_key=req.idempotency_key, batch_id=batch_id,
                                         schedule_id=schedule_id, scheduled_for=scheduled_for,
                                         tenant=tenant, batch_cost_budget_usd=batch_cost_budget_usd)
        if created:
            self.send(ITERATE, [rid, 0], priority=message_priorities(broker_url(self.settings))[req.priority])
        return RunHandle(self, rid, created=created)

    def admit(self, tenant: str, run_id: str) -> None:
        """A place among the tenant's ``max_active_runs`` for ``run_id``; ``TooManyRequests``
        (HTTP 429 with ``Retry-After``) when every place is taken."""
        from reactq.shared.stores.active import ActiveRuns
        from reactq.shared.tenants import quota_of

        limit = quota_of(self.settings, tenant).max_active_runs
        if limit is not None and not ActiveRuns(self.redis, self.keys).admit(tenant, run_id, limit):
            raise TooManyRequests(f"tenant {tenant} has {limit} active runs (its max_active_runs); "
                                  "retry when one has ended", field="max_active_runs")

    def check_tenant_cap(self, model: str | None, tenant: str) -> None:
        """A tenant with a daily dollar cap may only use priced models (422 naming ``model``)."""
        from reactq.shared.tenants import quota_of

        if quota_of(self.settings, tenant).cost_per_day_usd is not None:
            check_priced("model", model, self.model_specs())

    def handle(self, run_id: str) -> RunHandle:
        """A handle for an existing run (``RunNotFound`` if there is none)."""
        self.store.status(run_id)
        return RunHandle(self, run_id, created=False)

    def workers_seen(self, timeout: float = 1.0) -> list[str]:
        """Names of workers that answered a ping."""
        replies = self.celery.control.ping(timeout=timeout) or []
        return [name for r in replies for name in r]


__all__ = ["Dispatcher", "NoWorker", "RunHandle", "RunNotFound"]
