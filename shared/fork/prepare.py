"""A fork's preparation from its parent's state and ledger: the turn it starts at, its plan,
its first state (the parent's history) and the request it is admitted with. Nothing is
created here: the caller hands the result to the one creation path (``dispatcher/fork.py``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reactq.shared.engine.fork import Plan, fork_turn, history_before, make_plan, seed_state
from reactq.shared.engine.recorded import Recorded, ReplayPolicy, recorded_calls, run_calls
from reactq.shared.engine.state import RunState
from reactq.shared.errors import ForkConflict
from reactq.shared.fork.models import FromSpec
from reactq.shared.engine.fork import ForkEdit
from reactq.shared.engine.recorded import Reuse
from reactq.shared.requests import RunRequest, WebhookSpec
from reactq.shared.stores.recorded import ledger_records
from reactq.shared.stores.run_hash import RunRecord
from reactq.shared.stores.runs import RunStore


@dataclass
class PreparedFork:
    """What creating a fork needs: its request, first state and parent; and its plan."""

    parent: RunRecord
    turn: int
    plan: Plan
    request: RunRequest
    seed: RunState

    @property
    def forked_from(self) -> dict[str, Any]:
        return {"run_id": self.parent.run_id, "turn": self.turn}


def parent_state(parent: RunRecord) -> RunState:
    """The parent's last committed state; ``ForkConflict`` when it has none to fork from."""
    if parent.status not in ("succeeded", "failed", "cancelled"):
        raise ForkConflict(f"run {parent.run_id} has not ended (it is {parent.status}): only a run that "
                           "ended can be forked")
    if parent.state is None:
        raise ForkConflict(f"run {parent.run_id} ended before its first step: it has no turn to fork from")
    return parent.state


def prepare(store: RunStore, parent_id: str, *, run_id: str, start: FromSpec = "last_failure",
            reuse: Reuse = "effects", edit: ForkEdit | None = None, idempotent: Mapping[str, bool],
            idempotency_key: str | None = None, webhook: WebhookSpec | None = None,
            now: float | None = None) -> PreparedFork:
    """Prepare a fork of ``parent_id`` (``RunNotFound`` when it is gone). ``idempotent``: each
    tool's flag (from the workers' catalog)."""
    parent = store.load(parent_id)
    state = parent_state(parent)
    turn = fork_turn(state, start)
    policy = ReplayPolicy(source_run=parent_id, from_turn=turn, reuse=reuse)
    records = ledger_records(store, parent_id)
    calls = recorded_calls(run_calls(state), records, dict(idempotent), from_turn=turn)
    recorded = Recorded(policy=policy, calls=calls)
    plan = make_plan(turn, len(history_before(state, turn)), calls, policy)
    fields = dict(parent.request)
    # A fork is nobody's DAG step (a DAG's fork links its own, dispatcher/dag_fork.py).
    fields["metadata"] = {k: v for k, v in (fields.get("metadata") or {}).items() if k != "_dag"}
    fields.update(idempotency_key=idempotency_key, thread_id=None,
                  webhook=webhook.model_dump(mode="json") if webhook is not None else None)
    if edit is not None and edit.model is not None:
        fields["model"] = edit.model
    if edit is not None and edit.system_prompt is not None:
        fields["system_prompt"] = edit.system_prompt
    request = RunRequest.model_validate(fields)
    seed = seed_state(state, turn, run_id=run_id, recorded=recorded, edit=edit,
                      now=time.time() if now is None else now,
                      webhook_on_done=webhook is not None and webhook.wants("done"), ledger=records)
    seed.metadata.pop("_dag", None)
    return PreparedFork(parent=parent, turn=turn, plan=plan, request=request, seed=seed)
