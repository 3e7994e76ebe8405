"""A worker's DAG objects (``DagContext``), built once per process on top of its ``Runtime``,
and ``send``, how the DAG tasks queue their next task.
"""

from __future__ import annotations

import logging
import time
from functools import cached_property
from typing import Any

from pydantic import ValidationError

from reactq.shared.dag import machine as M
from reactq.shared.dag.binding import name_for_role
from reactq.shared.dag.config import DagConfig
from reactq.shared.dag.state import DagState
from reactq.shared.errors import RequestError, RunNotFound, TooManyRequests
from reactq.shared.service import Origin
from reactq.shared.service.ops import cancel_run
from reactq.shared.stores.dags import DagStore
from reactq.shared.tenants.quotas import quota_of
from reactq.shared.webhooks import webhook_id
from reactq.shared.wire import RUNS_QUEUE
from reactq.workers import webhooks
from reactq.workers.app import app
from reactq.workers.runtime import Runtime, runtime

log = logging.getLogger(__name__)

DAG_STEP = Origin("dag")


def send(task: str, args: list[Any], countdown: float | None = None, queue: str = RUNS_QUEUE) -> None:
    app.send_task(task, args=args, queue=queue, countdown=countdown, argsrepr=repr(args),
                  kwargsrepr="{}")


class DagContext:
    """A worker's DAG objects, built once per process on top of its ``Runtime``."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    @property
    def store(self) -> DagStore:
        return self.rt.stores.dags

    @cached_property
    def config(self) -> DagConfig:
        return DagConfig()

    def env(self) -> M.Env:
        models = self.rt.models
        return M.Env(config=self.config, now=time.time(),
                     model_for=lambda hint: name_for_role(models, hint))

    def save(self, state: DagState, version: int, t: M.Transition) -> bool:
        """Save, then carry out the effects (only a winning save has any). A DAG whose
        request has a webhook arms its ``dag.done`` message before its terminal save (a crash
        in between leaves it armed; its delivery finds the DAG not over and waits for the
        save that ends it) and sends it after."""
        hook = state.phase == "done" and webhooks.wants_done(self.rt, "dag", state.dag_id)
        if hook:
            webhooks.store(self.rt).arm(webhook_id("dag", state.dag_id))
        if not self.store.commit(state, version, t.events):
            log.info("dag %s: version %s was saved elsewhere", state.dag_id, version)
            return False
        for effect in t.effects:
            self._apply(effect, state.dag_id, state.tenant)
        if hook:
            webhooks.send_done("dag", state.dag_id, lambda task, args, queue: send(task, args, queue=queue))
        return True

    def _apply(self, effect: M.Effect, dag_id: str, tenant: str) -> None:
        door = self.rt.door
        if isinstance(effect, M.StartRun):
            self._start_step(effect, dag_id, tenant)
        elif isinstance(effect, M.CancelRun):
            cancel_run(door.store, door.send, effect.run_id)
        else:
            send(effect.task, effect.args, effect.countdown)

    def _start_step(self, effect: M.StartRun, dag_id: str, tenant: str) -> None:
        """A step's run comes in by the door, as any run does. Past its tenant's
        ``max_active_runs`` it is not made: the step waits for room (no worker slot held) and
        the DAG's next check tries again (``drive._observe``)."""
        door = self.rt.door
        try:
            got = door.create_run(effect.request, tenant=tenant, origin=DAG_STEP, run_id=effect.run_id)
        except TooManyRequests:
            log.info("dag %s: step %s waits for room (tenant %s is at its max_active_runs)",
                     dag_id, effect.step_id, tenant)
            return
        except (RequestError, ValidationError) as exc:
            log.warning("dag %s: step %s refused at the door: %s", dag_id, effect.step_id, exc)
            return
        if not got.created:
            door.start_run(effect.run_id)  # made before a crash: its first step may be lost
        if self.store.cancel_requested(dag_id):
            # A cancel that looked for this run before it existed found nothing to stop.
            cancel_run(door.store, door.send, effect.run_id)

    def waits_for_room(self, tenant: str) -> bool:
        """The tenant holds every place its ``max_active_runs`` allows (a step not made yet
        waits for room rather than for a worker)."""
        limit = quota_of(self.rt.settings, tenant).max_active_runs
        return limit is not None and self.rt.stores.active.count(tenant) >= limit

    def run_status(self, run_id: str) -> dict[str, Any] | None:
        try:
            return self.rt.store.status(run_id)
        except RunNotFound:
            return None


_ctx: DagContext | None = None


def context() -> DagContext:
    global _ctx
    if _ctx is None:
        _ctx = DagContext(runtime())
    return _ctx
