"""``POST /v1/dags/{id}/fork``: a new DAG that keeps its source's succeeded steps and their
results, re-runs each failed step as a fork of its run (from the run's last failure) and the
steps that depend on it (afresh, with the new results), then analyzes and synthesizes again.

The new DAG's id comes from its source (the same request twice answers the same DAG), and
each fork's idempotency key from the new DAG and the step. The DAG is stored, executing,
before its forks are created: a fork that ends at once finds its DAG waiting for it.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from reactq.dispatcher.dag import DagDispatcher
from reactq.dispatcher.fork import tool_flags
from reactq.dispatcher.fork import create_fork_run
from reactq.shared.dag.state import DagState, StepState
from reactq.shared.errors import ForkConflict
from reactq.shared.fork.models import FromSpec
from reactq.shared.fork.prepare import prepare
from reactq.shared.observe.metrics_schema import label_field
from reactq.shared.models import Usage
from reactq.shared.stores.idempotency import idempotent_id
from reactq.shared.wire import DAG_ADVANCE


@dataclass
class DagFork:
    dag_id: str
    kept: list[str]
    rerun: list[str]
    created: bool = True


def fork_dag_id(source: str) -> str:
    return hashlib.sha256(f"dagfork\x00{source}".encode()).hexdigest()[:32]


def rerun_set(steps: list[StepState]) -> tuple[list[StepState], set[str]]:
    """(the failed steps that ran, every step to run again: those and their dependants)."""
    failed = [s for s in steps if s.status == "failed" and s.run_id]
    again = {s.id for s in failed}
    changed = True
    while changed:
        changed = False
        for s in steps:
            if s.id not in again and (s.status != "completed" or any(d in again for d in s.dependencies)):
                again.add(s.id)
                changed = True
    return failed, again


def fork_dag(dd: DagDispatcher, source: str) -> DagFork:
    """Fork ``source`` (``DagNotFound``; ``ForkConflict`` when it has not ended or no step failed)."""
    rec = dd.store.load(source)
    state = rec.state
    if state is None or state.phase != "done":
        raise ForkConflict(f"DAG {source} has not ended (it is {rec.status}): only a DAG that ended can be forked")
    failed, again = rerun_set(state.steps)
    if not failed:
        raise ForkConflict(f"DAG {source} has no failed step to re-run")
    new_id = fork_dag_id(source)
    kept = [s.id for s in state.steps if s.id not in again]
    if dd.store.r.exists(dd.store.keys.dag(new_id)):
        return DagFork(new_id, kept, sorted(again), created=False)
    d = dd.runs
    now = time.time()
    ids = {s.id: idempotent_id(f"dagfork:{new_id}:{s.id}", tenant=rec.tenant) for s in failed}
    fork = _new_state(state, new_id, again, ids, now)
    d.door.create_forked_dag(new_id, rec.request, fork, tenant=rec.tenant, forked_from=source)
    flags = tool_flags(d)
    for step in failed:
        assert step.run_id is not None
        # A step stopped by the DAG's cancel did not fail: it goes on from its last turn.
        start: FromSpec = "last_failure" if d.store.status(step.run_id).get("status") == "failed" else "last_turn"
        prepared = prepare(d.store, step.run_id, run_id=ids[step.id], start=start, idempotent=flags,
                           idempotency_key=f"dagfork:{new_id}:{step.id}")
        link = {"dag_id": new_id, "step_id": step.id, "round": fork.round}
        prepared.seed.metadata["_dag"] = link
        prepared.request = prepared.request.model_copy(update={"metadata": {**prepared.request.metadata,
                                                                           "_dag": link}})
        if create_fork_run(d, prepared).created:
            d.redis.hincrby(d.keys.metrics("forks"), label_field(["dag_step"]), 1)
    d.send(DAG_ADVANCE, [new_id, None])
    return DagFork(new_id, kept, sorted(again))


def _new_state(src: DagState, dag_id: str, again: set[str], forks: dict[str, str], now: float) -> DagState:
    steps = []
    for s in src.steps:
        if s.id not in again:
            steps.append(s.model_copy(deep=True))
        elif s.id in forks:
            steps.append(StepState(id=s.id, task=s.task, dependencies=s.dependencies, tool_hint=s.tool_hint,
                                   model_hint=s.model_hint, model=s.model, status="running", run_id=forks[s.id],
                                   started_at=now))
        else:
            steps.append(StepState(id=s.id, task=s.task, dependencies=s.dependencies, tool_hint=s.tool_hint,
                                   model_hint=s.model_hint))
    return src.model_copy(deep=True, update={
        "dag_id": dag_id, "status": "running", "phase": "executing", "steps": steps, "analysis": None,
        "answer": None, "output": None, "error": None, "usage": Usage(), "seq": 0, "version": 0,
        "interrupt_cursor": None, "tick": 0, "tick_due": 0.0, "started_at": now, "ended_at": None})
