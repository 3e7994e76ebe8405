"""What a run's hash holds, as the run store reads it: ``RunRecord`` (a loaded run),
``RunActivity`` (the stall sweeper's view), the ledger's recorded outcomes, and the fields
that add up what a run was billed, with the ops that add to them and read them (sent in a
step's round trips: ``shared/stores/roundtrip.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from reactq.shared.engine.state import Interrupt, RunState, ToolOutcome, load_state
from reactq.shared.errors import RunNotFound
from reactq.shared.keys import Keys
from reactq.shared.stores.roundtrip import Op
from reactq.shared.stores.streams import text
from reactq.shared.tenants.tenancy import DEFAULT_TENANT, owner_of

__all__ = ["COST_FIELD", "SPENT_FIELD", "RunActivity", "RunRecord", "cost_op", "interrupts_of", "outcomes_of",
           "record_of", "spend_op", "spending_op", "spent_op"]

#: The run hash's field that adds up the LLM tokens a run was billed (its ``token_budget``'s
#: spend, and a batch's: ``dispatcher/batch/flow.py``).
SPENT_FIELD = "tokens_spent"


def spend_op(keys: Keys, run_id: str, tokens: int) -> Op:
    """Add ``tokens`` to the run's recorded spend."""
    return Op(("HINCRBY", keys.run(run_id), SPENT_FIELD, tokens))


def spent_op(keys: Keys, run_id: str) -> Op:
    """Read the run's recorded spend (a reply of None: nothing spent yet)."""
    return Op(("HGET", keys.run(run_id), SPENT_FIELD))


#: The run hash's field that adds up the dollars a run was billed (priced calls; its
#: ``cost_budget_usd``'s spend, and a batch's).
COST_FIELD = "cost_spent"


def cost_op(keys: Keys, run_id: str, cost: float) -> Op:
    """Add ``cost`` dollars to the run's recorded spend."""
    return Op(("HINCRBYFLOAT", keys.run(run_id), COST_FIELD, repr(cost)))


def spending_op(keys: Keys, run_id: str) -> Op:
    """Read the run's recorded (tokens, dollars)."""
    return Op(("HMGET", keys.run(run_id), SPENT_FIELD, COST_FIELD))


@dataclass
class RunRecord:
    """A run as stored: state (None before the first step), bookkeeping fields."""

    run_id: str
    status: str
    step_no: int
    pub_seq: int
    state: RunState | None
    request: dict[str, Any]
    cancel: bool
    created_at: float
    result: dict[str, Any] | None
    interrupts: list[Interrupt] | None = None
    """With ``load_step``: the interrupts after the committed cursor."""
    ledger: dict[str, dict[str, Any]] | None = None
    """With ``load_step``: the ledger records of the pending turn's calls (those written)."""
    turn_began: float | None = None
    """When the pending tool turn's LLM call began (metrics: the turn's duration)."""
    waiting: int = 0
    """Calls of the pending turn that wait for a person's decision."""
    waiting_seen: bool = False
    """Whether a call of the run ever waited (approval events then moved ``pub_seq``)."""
    tenant: str = DEFAULT_TENANT
    """Who owns the run (the tenant of the key that made it)."""
    batch_id: str | None = None
    """The batch the run is a line of."""
    batch_cost_budget_usd: float | None = None
    """That batch's ``cost_budget_usd`` (every call of the run is held against it)."""
    seed: RunState | None = None
    """A fork's first state (its parent's history, ``engine/fork.py``), before its first step."""
    replay: dict[str, Any] | None = None
    """A ``ReplayPolicy`` (as JSON): recorded calls of another run that may answer this run's
    calls (``engine/recorded.py``), read when the run takes its first step."""


@dataclass(frozen=True)
class RunActivity:
    """Whether a run moves (the stall sweeper's view): its status, when its record last
    changed, and whether a task holds its lease."""

    run_id: str
    status: str | None
    updated_at: float | None
    held: bool


def record_of(run_id: str, f: dict[str, Any]) -> RunRecord:
    """A run hash (field names as text) as a ``RunRecord``."""
    if not f:
        raise RunNotFound(f"no run with id {run_id!r} (it may have expired)")
    began = f.get("turn_began")
    return RunRecord(
        run_id=run_id, status=text(f.get("status", b"queued")), step_no=int(f.get("step_no", 0)),
        pub_seq=int(f.get("pub_seq", 0)), state=load_state(f["state"]) if "state" in f else None,
        request=json.loads(f["request"]) if "request" in f else {},
        cancel=text(f.get("cancel", b"0")) == "1", created_at=float(f.get("created_at", 0)),
        result=json.loads(f["result"]) if "result" in f else None,
        turn_began=float(began) if began else None, tenant=owner_of(f.get("tenant")),
        waiting=int(f.get("waiting", 0) or 0), waiting_seen="waiting" in f,
        batch_id=text(f["batch_id"]) if f.get("batch_id") else None,
        batch_cost_budget_usd=float(f["batch_cost_budget_usd"]) if f.get("batch_cost_budget_usd") else None,
        replay=json.loads(f["replay"]) if f.get("replay") else None,
        seed=load_state(f["seed"]) if f.get("seed") else None,
    )


def interrupts_of(entries: list[Any]) -> list[Interrupt]:
    """Interrupt stream entries (fields as a dict, or as a flat list from a script)."""
    out = []
    for entry_id, fields in entries:
        pairs: Iterable[tuple[Any, Any]] = (
            fields.items() if isinstance(fields, dict) else zip(fields[::2], fields[1::2], strict=True))
        f = {text(k): text(v) for k, v in pairs}
        out.append(Interrupt(id=f.get("id", text(entry_id)), content=f["content"], cursor=text(entry_id)))
    return out


def outcomes_of(records: dict[str, dict[str, Any]], call_ids: list[str]) -> dict[str, ToolOutcome]:
    """The recorded outcomes (status ``done``) among ledger ``records``, for ``call_ids``."""
    return {cid: ToolOutcome.model_validate(rec["outcome"]) for cid in call_ids
            if (rec := records.get(cid)) is not None and rec.get("status") == "done"}
