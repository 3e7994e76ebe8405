"""Reading a run's recorded calls: its state's calls and its tool ledger, as ``Recorded``
(``reactq.shared.engine.recorded``) — what a fork's plan is made of, and what a run that
carries a ``ReplayPolicy`` answers its calls from."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from reactq.shared.engine.recorded import Recorded, RecordedCall, ReplayPolicy, recorded_calls, run_calls
from reactq.shared.engine.state import RunState
from reactq.shared.errors import RunNotFound
from reactq.shared.stores.runs import RunStore
from reactq.shared.stores.streams import text


def ledger_records(store: RunStore, run_id: str) -> dict[str, dict[str, Any]]:
    """Every ledger record of ``run_id``, by call id."""
    raw = store.r.hgetall(store.keys.run_tools(run_id))
    return {text(k): json.loads(v) for k, v in raw.items()}


def calls_of(store: RunStore, state: RunState, idempotent: Mapping[str, bool], *, from_turn: int = 1,
             only_done: bool = False) -> list[RecordedCall]:
    """The calls ``state``'s run made from ``from_turn`` on, with what its ledger says of them."""
    turns = run_calls(state)
    return recorded_calls(turns, ledger_records(store, state.run_id), dict(idempotent),
                          from_turn=from_turn, only_done=only_done)


def load_recorded(store: RunStore, policy: ReplayPolicy, idempotent: Mapping[str, bool]) -> Recorded:
    """``policy``'s recorded calls, read from its source run (``RunNotFound`` once it expired).
    ``idempotent``: each tool's flag (a tool not listed counts as not idempotent)."""
    try:
        src = store.load(policy.source_run).state
    except RunNotFound:
        if policy.match != "done":
            raise
        src = None  # a replay (only calls recorded done match) of a run that is gone: none match
    calls = [] if src is None else calls_of(store, src, idempotent, from_turn=policy.from_turn,
                                            only_done=policy.match == "done")
    return Recorded(policy=policy, calls=calls)
