"""Answering tool calls from a recorded ledger: another run's calls, from one of its turns on.

A run may carry ``Recorded``: the calls an earlier run's ledger recorded (``RecordedCall``,
built by ``recorded_calls`` from that run's state and ledger records) and a ``ReplayPolicy``
saying what to do with them. When the loop dispatches a turn (``loop._dispatch``), each of
the turn's calls is matched against the recorded calls not matched yet, by tool name and
``args_digest`` (each recorded call at most once, in the order they were recorded), and
gets a ``Decision``:

* ``reuse``: the recorded result is the observation; the tool is not executed and the
  call's ``iteration done`` carries ``reused: true``;
* ``run``: the tool is executed as usual;
* ``wait``: the call waits for a person's decision (an approval whose ``reason`` names the
  recorded run) — a recorded call that may or may not have run is never repeated blindly;
* ``refuse``: not executed; the observation says it was not recorded (a replay that runs
  no live tools).

The decision is part of the committed state (and of the turn a tool task reads), so it is
taken once however often a step is delivered, and both shells carry it out the same way:
``steps.run_tool`` in one process, ``workers/runs/approvals.run_call`` in a tool task.

A fork uses ``ReplayPolicy(reuse=…)``; an eval's replay is ``ReplayPolicy(reuse="all",
match="done", unmatched="refuse")`` (``unmatched="run"`` with live tools): only the calls
recorded ``done`` match, and a call that matches none is not executed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from reactq.shared.engine.approval import args_digest
from reactq.shared.engine.state import ToolOutcome
from reactq.shared.models import ToolCallRequest

Reuse = Literal["effects", "all", "none"]
LedgerStatus = Literal["done", "uncertain", "failed", "not_run"]
Action = Literal["reuse", "run", "wait", "refuse"]
#: The plan's word for an action (what happens if the model makes the call again).
IF_REPEATED: dict[str, str] = {"reuse": "reused", "run": "runs", "wait": "waits", "refuse": "refused"}

NOT_RECORDED_OBSERVATION = (
    "Not run: this tool call was not recorded in {label}, and recorded calls are replayed "
    "without running any tool live. No tool was executed."
)


class ReplayPolicy(BaseModel):
    """What a run does with the calls of a recorded ledger (a fork's and an eval's replay)."""

    source_run: str
    """The run whose ledger recorded the calls."""
    from_turn: int = Field(1, ge=1)
    """The recorded run's first turn whose calls count."""
    reuse: Reuse = "effects"
    """A matched call recorded ``done``: ``effects`` reuses it unless the tool is idempotent
    (then it runs again), ``all`` always reuses it, ``none`` always runs it again."""
    unmatched: Literal["run", "refuse"] = "run"
    """A call that matches no recorded call: executed as usual, or answered without running."""
    match: Literal["recorded", "done"] = "recorded"
    """Which recorded calls may match: every one the source run made (a fork: an uncertain
    one waits for a person), or only those recorded ``done`` (an eval's replay)."""
    label: str = ""
    """How observations and reasons name the recorded source (default: ``run <id>``)."""

    def source(self) -> str:
        return self.label or f"run {self.source_run}"


class RecordedCall(BaseModel):
    """One call the recorded run made, as its ledger has it."""

    turn: int
    tool_call_id: str
    tool_name: str
    args_digest: str
    idempotent: bool = True
    ledger: LedgerStatus
    outcome: ToolOutcome | None = None
    """The recorded result (``done`` calls): what a reused call's observation is."""


class Decision(BaseModel):
    """What one call of the run does (``action``) and, when matched, which recorded call."""

    action: Action
    recorded_id: str | None = None
    reason: str | None = None
    """``wait``: why a person must decide (names the recorded run)."""


class Recorded(BaseModel):
    """A run's reference to recorded calls, and the matches made so far."""

    policy: ReplayPolicy
    calls: list[RecordedCall] = Field(default_factory=list)
    decisions: dict[str, Decision] = Field(default_factory=dict)
    """By this run's tool_call_id; a recorded call appears in at most one decision."""

    def used(self) -> set[str]:
        return {d.recorded_id for d in self.decisions.values() if d.recorded_id is not None}

    def match(self, calls: list[ToolCallRequest]) -> None:
        """Decide each of ``calls`` (a turn's, in call order) against the unmatched recorded calls."""
        used = self.used()
        for call in calls:
            if call.id in self.decisions:
                continue
            digest = args_digest(call.arguments)
            found = next((r for r in self.calls if r.tool_call_id not in used
                          and r.tool_name == call.name and r.args_digest == digest), None)
            if found is not None:
                used.add(found.tool_call_id)
            self.decisions[call.id] = decide(self.policy, found)

    def turn_view(self, call_ids: list[str]) -> dict[str, dict[str, Any]]:
        """What a tool task needs to carry out the decisions of ``call_ids`` (those that are
        not a plain ``run``): the action, the reason, and a reused call's recorded outcome."""
        by_id = {r.tool_call_id: r for r in self.calls}
        out: dict[str, dict[str, Any]] = {}
        for cid in call_ids:
            d = self.decisions.get(cid)
            if d is None or d.action == "run":
                continue
            view: dict[str, Any] = {"action": d.action, "reason": d.reason}
            rec = by_id.get(d.recorded_id or "")
            if d.action == "reuse" and rec is not None and rec.outcome is not None:
                view["outcome"] = rec.outcome.model_dump(mode="json")
            elif d.action == "refuse":
                view["observation"] = NOT_RECORDED_OBSERVATION.format(label=self.policy.source())
            out[cid] = view
        return out


def decide(policy: ReplayPolicy, found: RecordedCall | None) -> Decision:
    """The rule: what a call does, given the recorded call it matched (None: none)."""
    if found is None:
        return Decision(action="run" if policy.unmatched == "run" else "refuse")
    rid = found.tool_call_id
    if found.ledger == "uncertain":
        reason = (f"this call may already have run in {policy.source()} (its record there is "
                  f"uncertain: call {rid}); a person decides whether it runs again")
        return Decision(action="wait", recorded_id=rid, reason=reason)
    if found.ledger != "done" or found.outcome is None:
        return Decision(action="run", recorded_id=rid)
    if policy.reuse == "all" or (policy.reuse == "effects" and not found.idempotent):
        return Decision(action="reuse", recorded_id=rid)
    return Decision(action="run", recorded_id=rid)


def if_repeated(policy: ReplayPolicy, call: RecordedCall) -> str:
    """The plan's ``if_repeated`` for a recorded call: what happens if the model makes it again."""
    return IF_REPEATED[decide(policy, call).action]


def carried_out(view: dict[str, Any], call: ToolCallRequest, *, now: float,
                worker: str | None = None) -> ToolOutcome | None:
    """The outcome of a ``reuse`` or ``refuse`` decision (``Recorded.turn_view``), without
    running anything; None for a call that runs or waits."""
    if view.get("action") == "reuse" and view.get("outcome") is not None:
        out = ToolOutcome.model_validate(view["outcome"])
        return out.model_copy(update={"tool_call_id": call.id, "tool_name": call.name, "reused": True,
                                      "started_at": now, "ended_at": now, "worker": worker,
                                      "approval": None, "approved_args": None, "ask": None})
    if view.get("action") == "refuse":
        return ToolOutcome(tool_call_id=call.id, tool_name=call.name, observation=str(view.get("observation")),
                           started_at=now, ended_at=now, worker=worker)
    return None


# -- building the recorded calls from a run's state and ledger (pure: the caller reads them) --------

def ledger_status(record: dict[str, Any] | None) -> LedgerStatus:
    """What a ledger record says of its call: ``done`` (it ran, its result is recorded),
    ``uncertain`` (it may or may not have run), ``failed`` (it ran and failed, or a hook
    blocked it) or ``not_run`` (no record, or a person's decision answered it)."""
    if record is None:
        return "not_run"
    if record.get("status") != "done":
        # claimed (pending), approved, or waiting: a claim or an approval may have started it
        return "not_run" if record.get("status") == "waiting" else "uncertain"
    out = record.get("outcome") or {}
    if out.get("uncertain") or out.get("crashed"):
        return "uncertain"
    if out.get("approval") in ("rejected", "responded", "expired"):
        return "not_run"
    if out.get("error") is not None or out.get("blocked"):
        return "failed"
    return "done"


def recorded_calls(turn_calls: list[tuple[int, ToolCallRequest]], records: dict[str, dict[str, Any]],
                   idempotent: dict[str, bool], *, from_turn: int = 1,
                   only_done: bool = False) -> list[RecordedCall]:
    """The calls a run made from ``from_turn`` on (``turn_calls``: (turn, call) in call
    order, ``run_calls``), with what its ledger ``records`` (by call id) say of them.
    ``idempotent``: each tool's flag (a tool not listed counts as not idempotent).
    ``only_done``: keep only the calls recorded ``done``."""
    out = []
    for turn, call in turn_calls:
        if turn < from_turn:
            continue
        rec = records.get(call.id)
        status = ledger_status(rec)
        if only_done and status != "done":
            continue
        outcome = ToolOutcome.model_validate(rec["outcome"]) if rec and status == "done" else None
        out.append(RecordedCall(turn=turn, tool_call_id=call.id, tool_name=call.name,
                                args_digest=args_digest(call.arguments),
                                idempotent=idempotent.get(call.name, False), ledger=status, outcome=outcome))
    return out


def run_calls(state: Any) -> list[tuple[int, ToolCallRequest]]:
    """Every call a run made, with its turn, in call order: from its native assistant
    messages (calls a stop answered without a result included) or, in JSON mode, from its
    recorded steps and the calls of a turn still pending."""
    if state.mode != "native":
        out = [(s.iteration, ToolCallRequest(id=s.tool_call_id, name=s.tool_name or "", arguments=s.tool_args))
               for s in state.steps if s.type == "tool_call" and s.tool_call_id]
        seen = {c.id for _, c in out}
        return out + [(state.iteration, c) for c in state.pending_calls if c.id not in seen]
    out = []
    for turn, at in enumerate(reply_indexes(state), 1):
        out += [(turn, c) for c in (state.messages[at].tool_calls or [])]
    return out


def reply_indexes(state: Any) -> list[int]:
    """Indexes of the loop's assistant messages in ``state.messages``: one per LLM call that
    answered, in turn order (those after the query's message)."""
    start = next((i for i, m in enumerate(state.messages)
                  if i > 0 and m.role == "user" and m.content == state.query), 1)
    return [i for i, m in enumerate(state.messages) if i > start and m.role == "assistant"]


# -- over a run's state (the state keeps ``Recorded`` as JSON) ----------------------------------

def of(state: Any) -> Recorded | None:
    """The run's ``Recorded`` (None: it answers no call from a recorded ledger)."""
    raw = getattr(state, "recorded", None)
    return Recorded.model_validate(raw) if raw else None


def match_turn(state: Any) -> None:
    """Decide the pending calls of the turn just dispatched (``loop._dispatch``)."""
    rec = of(state)
    if rec is None:
        return
    rec.match(list(state.pending_calls))
    state.recorded = rec.model_dump(mode="json")


def turn_view(state: Any) -> dict[str, dict[str, Any]]:
    """The pending turn's decisions that are not a plain ``run`` (for ``turn_summary``)."""
    rec = of(state)
    return {} if rec is None else rec.turn_view([c.id for c in state.pending_calls])
