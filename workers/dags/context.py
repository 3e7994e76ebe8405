"""A worker's DAG objects (``DagContext``), built once per process on top of its ``Runtime``,
and ``send``, how the DAG tasks queue their next task.
"""

from __future__ import annotations

import logging
import time
from functools import cached_property
from typing import Any

from reactq.shared.dag import machine as M
from reactq.shared.dag.binding import name_for_role
from reactq.shared.dag.config import DagConfig
from reactq.shared.dag.state import DagState
from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.errors import RunNotFound
from reactq.shared.stores.dags import DagStore
from reactq.shared.webhooks import webhook_id
from reactq.shared.wire import ITERATE, RUNS_QUEUE
from reactq.workers import webhooks
from reactq.workers.app import app
from reactq.workers.runtime import Runtime, runtime

log = logging.getLogger(__name__)


def send(task: str, args: list[Any], countdown: float | None = None, queue: str = RUNS_QUEUE) -> None:
    app.send_task(task, args=args, queue=queue, countdown=countdown, argsrepr=repr(args),
                  kwargsrepr="{}")


class DagContext:
    """A worker's DAG objects, built once per process on top of its ``Runtime``."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    @cached_property
    def store(self) -> DagStore:
        s = self.rt.settings
        return DagStore(self.rt.redis, keys=self.rt.keys, ttl_seconds=s.run_ttl_seconds,
                        maxlen=s.events_maxlen, due_seconds=s.due_seconds)

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
        runs = self.rt.store
        if isinstance(effect, M.StartRun):
            if not runs.exists(effect.run_id):
                runs.create(effect.run_id, effect.request, tenant=tenant)
            if self.store.cancel_requested(dag_id):
                # A cancel that looked for this run before it existed found nothing to stop.
                runs.request_cancel(effect.run_id)
            send(ITERATE, [effect.run_id, 0])
        elif isinstance(effect, M.CancelRun):
            try:
                rec = runs.load(effect.run_id)
            except RunNotFound:
                return
            if rec.status not in TERMINAL_STATUSES:
                runs.request_cancel(effect.run_id)
                send(ITERATE, [effect.run_id, rec.step_no])
        else:
            send(effect.task, effect.args, effect.countdown)

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
