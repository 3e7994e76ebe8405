"""The one door every run comes in by: ``Door`` over a process's ``Stores`` and a ``Send``.

    door = Door(Stores.from_settings(settings), celery_send(settings))
    got = door.create_run({"query": "what is 17*23?"}, tenant="acme", caller=caller)
    got.run_id, got.created                           # created False: an idempotent retry

Every entry calls it: the HTTP routes, ``reactq.Client`` through them, ``Dispatcher``, the
CLI, a batch line, a message on a thread, a DAG's step, a schedule's tick or trigger (and
a fork, an eval case or a protocol request the same way, with an ``Origin`` of their kind).
``create_run`` applies the admission of ``reactq.shared.service.admission`` in its order,
stores the run and sends its first step; nothing else writes a run record or sends a run's
first step (``tests/unit/test_layering.py``). Cancel, interrupt, deciding an approval and
creating a DAG are here too, each once.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from reactq.shared.dag.state import DagState
from reactq.shared.engine.state import TERMINAL_STATUSES, RunState
from reactq.shared.errors import RequestError
from reactq.shared.keys import Keys
from reactq.shared.redisconn import broker_url
from reactq.shared.requests import DagRequest, RunRequest
from reactq.shared.service import admission as A
from reactq.shared.service.approvals import decide
from reactq.shared.service.ops import cancel_run, send_first_step
from reactq.shared.service.send import Send
from reactq.shared.stores.bundle import Stores
from reactq.shared.service.threads import submit_on_thread
from reactq.shared.settings import Settings
from reactq.shared.stores.approvals import ApprovalStore
from reactq.shared.stores.idempotency import idempotent_id
from reactq.shared.stores.keys import Caller
from reactq.shared.stores.runs import RunStore
from reactq.shared.tenancy import DEFAULT_TENANT
from reactq.shared.wire import DAG_START, RUNS_QUEUE, message_priorities

__all__ = ["Created", "Door", "Origin", "OriginKind", "check_interrupt"]

OriginKind = Literal["run", "batch", "thread", "dag", "schedule", "fork", "eval", "protocol"]


@dataclass(frozen=True)
class Origin:
    """Where a run comes from, and what its record is filed under."""

    kind: OriginKind = "run"
    batch_id: str | None = None
    """A batch line: the run is indexed under its batch (``GET /v1/runs?batch_id=``)."""
    batch_cost_budget_usd: float | None = None
    """The batch's dollar cap, which every call of the run is held against."""
    schedule_id: str | None = None
    """A schedule's tick or trigger: indexed under it (``GET /v1/runs?schedule_id=``)."""
    scheduled_for: str | None = None
    """A tick's run: the nominal tick (ISO-8601 UTC)."""
    seed: RunState | None = None
    """A fork's first state: its parent's history before the fork point (``shared/fork``)."""
    forked_from: dict[str, Any] | None = None
    """A fork's ``{run_id, turn}``, kept on its record."""
    replay: dict[str, Any] | None = None
    """An eval's replay: a ``ReplayPolicy`` (as JSON) whose recorded calls answer the run's calls."""


PLAIN = Origin()


@dataclass(frozen=True)
class Created:
    """What ``create_run`` did."""

    run_id: str
    created: bool
    """False: the idempotency key named a run that exists (nothing was sent)."""
    injected: bool = False
    """A thread's ``inject``: the query went into the thread's active run ``run_id``."""
    interrupt_id: str | None = None


def check_interrupt(text: str, max_chars: int) -> None:
    """A follow-up's content: not blank, at most ``REACTQ_MAX_INTERRUPT_CHARS``."""
    if not text.strip():
        raise RequestError("content must not be empty", field="content")
    if len(text) > max_chars:
        raise RequestError(f"content: at most {max_chars} characters (REACTQ_MAX_INTERRUPT_CHARS), "
                           f"got {len(text)}", field="content")


class Door:
    """The operations every entry uses, over one process's stores."""

    def __init__(self, stores: Stores, send: Send) -> None:
        self.stores = stores
        self.send = send

    # What the thread and approval helpers read (``ThreadDoor``, ``ApprovalDoor``).
    @property
    def settings(self) -> Settings:
        return self.stores.settings

    @property
    def keys(self) -> Keys:
        return self.stores.keys

    @property
    def store(self) -> RunStore:
        return self.stores.runs

    @property
    def approvals(self) -> ApprovalStore:
        return self.stores.approvals

    @cached_property
    def _priorities(self) -> dict[str, int]:
        return message_priorities(broker_url(self.settings))

    # -- runs --------------------------------------------------------------------------------
    def validate_run(self, request: RunRequest | dict[str, Any]) -> RunRequest:
        """Admission step 1 alone (what a schedule or batch checks before it stores anything)."""
        return A.validate_run(self.stores, request)

    def create_run(self, request: RunRequest | dict[str, Any], *, tenant: str = DEFAULT_TENANT,
                   caller: Caller | None = None, origin: Origin = PLAIN,
                   run_id: str | None = None) -> Created:
        """Admit, store and start a run of ``tenant`` (``caller``: the key that asks, None for an
        in-cluster entry; ``origin``: what made it; ``run_id``: an id the entry chose, e.g. a
        DAG step's or a tick's). Raises ``RequestError`` (422), ``Forbidden`` (403),
        ``TooManyRequests`` (429), ``ThreadBusy`` (409), pydantic's ``ValidationError``."""
        req = A.validate_run(self.stores, request)
        A.check_scope(req, caller)
        rid = A.run_id_for(req, tenant, run_id)

        def admit(rid: str) -> None:
            A.take_place(self.stores, tenant, rid)
            try:
                A.check_run_caps(self.stores, req, tenant, batch_cap=origin.batch_cost_budget_usd)
            except RequestError:
                A.release_place(self.stores, tenant, rid)
                raise

        if req.thread_id is not None:
            sub = submit_on_thread(self, req, run_id, tenant=tenant, admit=admit)
            return Created(sub.run_id, sub.created, sub.injected, sub.interrupt_id)
        admit(rid)
        # The RUN_START guardrails are the run's first step, on a worker (hooks live there).
        stored, created = self.store.create(rid, req.model_dump(mode="json"), idempotency_key=req.idempotency_key,
                                            batch_id=origin.batch_id, schedule_id=origin.schedule_id,
                                            scheduled_for=origin.scheduled_for, tenant=tenant,
                                            batch_cost_budget_usd=origin.batch_cost_budget_usd,
                                            seed=origin.seed, forked_from=origin.forked_from,
                                            replay=origin.replay)
        if created:
            self.start_run(stored, req.priority)
        return Created(stored, created)

    def start_run(self, run_id: str, priority: str = "interactive") -> None:
        """Send a stored run's first step (again: a batch or DAG re-attaching a run that an
        earlier attempt stored but may not have started)."""
        send_first_step(self.send, run_id, priority=self._priorities.get(priority))

    def check_run(self, run: dict[str, Any], *, tenant: str, caller: Caller | None,
                  field: str = "run") -> RunRequest:
        """A run kept to be made later (a schedule's): validation, scope and the dollar-cap
        rule now, each refusal naming its field under ``field``; nothing is stored."""
        try:
            req = self.validate_run(RunRequest.model_validate(run))
            A.check_scope(req, caller)
            A.check_run_caps(self.stores, req, tenant)
        except RequestError as exc:
            raise A.prefixed(field, exc) from exc
        return req

    def check_batch(self, requests: list[RunRequest], *, tenant: str, caller: Caller | None,
                    batch_cap: float | None) -> None:
        """A batch's lines up front, before anything is stored: the scopes they need and the
        dollar-cap rule over every model they name (the batch's cap, a line's own, the
        tenant's). Each line passes the whole admission again when it is submitted."""
        for req in requests:
            A.check_scope(req, caller)
        seen: set[tuple[str | None, bool]] = set()
        for req in requests:
            if (req.model, req.cost_budget_usd is not None) not in seen:
                seen.add((req.model, req.cost_budget_usd is not None))
                A.check_run_caps(self.stores, req, tenant, batch_cap=batch_cap,
                                 field="cost_budget_usd" if batch_cap is not None else "model")

    def cancel_run(self, run_id: str) -> bool:
        """Stop the run at its next step boundary (``cancelled``); False when it had ended.
        ``RunNotFound`` for an unknown id."""
        self.store.status(run_id)
        return cancel_run(self.store, self.send, run_id)

    def interrupt_run(self, run_id: str, text: str) -> str:
        """A follow-up message, taken at the run's next drain point (where the ``RUN_START``
        guardrails check it first); its id. ``RequestError`` naming ``run_id`` once it ended."""
        s = self.settings
        check_interrupt(text, s.max_interrupt_chars)
        if self.store.status(run_id)["status"] in TERMINAL_STATUSES:
            raise RequestError(f"run {run_id} has already ended", field="run_id")
        return self.store.add_interrupt(run_id, text, limit=s.max_interrupts)

    def decide_approval(self, run_id: str, approval_id: str, decision: str, *,
                        args_digest: str | None = None, args: dict[str, Any] | None = None,
                        message: str | None = None, by: str | None = None) -> dict[str, Any]:
        """Decide a pending approval (``approve``, ``edit``, ``reject``, ``respond``) and send
        what it made due; ``{approval_id, status}``."""
        return decide(self, run_id, approval_id, decision, args_digest=args_digest, args=args,
                      message=message, by=by)

    # -- DAGs ----------------------------------------------------------------------------
    def create_dag(self, request: DagRequest | dict[str, Any], *, tenant: str = DEFAULT_TENANT,
                   dag_id: str | None = None, max_steps: int = 100) -> tuple[str, bool]:
        """Check (registries, plan, the dollar-cap rule over every model it may call), store
        and start a DAG of ``tenant``; ``(dag_id, created)``. Its steps' runs come in by
        ``create_run`` as they start."""
        req = request if isinstance(request, DagRequest) else DagRequest.model_validate(request)
        A.check_dag(self.stores, req, tenant)
        A.check_plan(req, max_steps=max_steps)
        if dag_id is None:  # a key names one id: a retry after a kill finds what it wrote
            dag_id = (uuid.uuid4().hex if req.idempotency_key is None
                      else idempotent_id(req.idempotency_key, kind="dag", tenant=tenant))
        did, created = self.stores.dags.create(dag_id, req.model_dump(mode="json"),
                                               idempotency_key=req.idempotency_key, tenant=tenant)
        if created:
            self.send(DAG_START, [did], RUNS_QUEUE)
        return did, created

    def create_forked_dag(self, dag_id: str, request: dict[str, Any], state: DagState, *, tenant: str,
                          forked_from: str) -> None:
        """Store a DAG's fork as its first state (kept steps done, the rest to run again);
        the DAG's driver starts it, and its failed steps' forks come in by ``create_run``."""
        self.stores.dags.create(dag_id, request, tenant=tenant)
        self.stores.dags.r.hset(self.stores.keys.dag(dag_id), "forked_from", forked_from)
        self.stores.dags.commit(state, 0, [])
