"""Forking a run, as pure logic over the parent's state and ledger: which turn the fork starts
at, the plan (what happens to each call the parent made from that turn on if the fork's model
makes it again), and the fork's first state — the parent's history before that turn.

**Turn N** is the loop's N-th LLM call. The fork keeps the parent's messages before turn N's
LLM call (every tool result of earlier turns included, as the parent recorded them), then
starts with turn N's call. Its calls are answered from the parent's ledger
(``engine/recorded.py``) from turn N on, by the fork's ``reuse``.

The history is cut by counting the loop's assistant messages (one per LLM call that
answered): a parent whose context guard compacted the turns before N cannot be forked from
N (``ForkConflict``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from reactq.shared.engine import prompts as P
from reactq.shared.engine.jsonx import md5_args, text_json
from reactq.shared.engine.recorded import (
    Recorded, RecordedCall, ReplayPolicy, Reuse, if_repeated, reply_indexes, run_calls,
)
from reactq.shared.engine.loop import llm_observation
from reactq.shared.engine.state import TERMINAL_STATUSES, RunState, ToolOutcome
from reactq.shared.errors import ForkConflict, RequestError
from reactq.shared.models import ChatMessage, Usage

From = Literal["last_failure", "last_turn"] | int


class ToolResultEdit(BaseModel):
    """Replace one observation of the turn before the fork's first."""

    model_config = ConfigDict(extra="forbid")

    tool_call_id: str = Field(..., min_length=1, max_length=200)
    observation: str = Field(..., max_length=100_000)


class ForkEdit(BaseModel):
    """What the fork changes from its first turn on."""

    model_config = ConfigDict(extra="forbid")

    message: str | None = Field(None, min_length=1, max_length=100_000)
    """A user message added before the fork's first LLM call."""
    tool_result: ToolResultEdit | None = None
    """Replaces one observation of turn N−1 (the fork sees it in place of the parent's)."""
    model: str | None = Field(None, min_length=1, max_length=200)
    """The model of the fork's turns (a registry name)."""
    system_prompt: str | None = Field(None, max_length=100_000)
    """The run's extra instructions from the fork's first turn on."""


class PlannedCall(BaseModel):
    """One call the parent made from the fork's turn on, and what happens if it is made again."""

    turn: int
    tool_call_id: str
    tool_name: str
    args_digest: str
    idempotent: bool
    ledger: Literal["done", "uncertain", "failed", "not_run"]
    if_repeated: Literal["reused", "runs", "waits", "refused"]


class Plan(BaseModel):
    """What a fork keeps and what its calls do (the 202 and the dry run answer it)."""

    turn: int
    """The fork's first turn (its first LLM call is the parent's turn ``turn`` again)."""
    history_messages: int
    """Messages of the parent's history the fork starts with."""
    calls: list[PlannedCall] = Field(default_factory=list)


def fork_turn(parent: RunState, spec: From) -> int:
    """The turn a fork of ``parent`` starts at. ``ForkConflict`` when the parent has not ended
    or, for ``last_failure``, did not fail; ``RequestError`` (field ``from``) for a turn the
    parent never reached."""
    if parent.status not in TERMINAL_STATUSES:
        raise ForkConflict(f"run {parent.run_id} has not ended (it is {parent.status}): only a run that "
                           "ended can be forked")
    last = max(parent.iteration, 1)
    if spec == "last_failure":
        if parent.status != "failed":
            raise ForkConflict(f"run {parent.run_id} did not fail (it {parent.status}): fork it from "
                               "last_turn or a turn number")
        return last
    if spec == "last_turn":
        return last
    if isinstance(spec, bool) or not isinstance(spec, int) or spec < 1 or spec > last:
        raise RequestError(f"from: a turn from 1 to {last} (the parent's turns), got {spec!r}", field="from")
    return spec


def make_plan(turn: int, history_messages: int, calls: list[RecordedCall], policy: ReplayPolicy) -> Plan:
    return Plan(turn=turn, history_messages=history_messages, calls=[
        PlannedCall(turn=c.turn, tool_call_id=c.tool_call_id, tool_name=c.tool_name, args_digest=c.args_digest,
                    idempotent=c.idempotent, ledger=c.ledger, if_repeated=if_repeated(policy, c))  # type: ignore[arg-type]
        for c in calls])


def history_before(parent: RunState, turn: int) -> list[ChatMessage]:
    """The parent's messages before turn ``turn``'s LLM call."""
    replies = reply_indexes(parent)
    if turn - 1 > len(replies):
        raise ForkConflict(f"run {parent.run_id}: the history before turn {turn} was compacted; fork it "
                           f"from turn {len(replies) + 1} or later")
    cut = replies[turn - 1] if turn - 1 < len(replies) else len(parent.messages)
    return [m.model_copy(deep=True) for m in parent.messages[:cut]]


def seed_state(parent: RunState, turn: int, *, run_id: str, recorded: Recorded, edit: ForkEdit | None,
               now: float, webhook_on_done: bool = False,
               ledger: dict[str, dict[str, Any]] | None = None) -> RunState:
    """The fork's first state: the parent's history before ``turn``, its edits, and its calls
    to be answered from ``recorded``. Its first step is the fork's ``select`` step (the
    ``fork`` event, the ``RUN_START`` guardrails), then turn ``turn``'s LLM call.
    ``ledger``: the parent's ledger records; a tool result it recorded ``done`` is the
    observation the fork sees (a stop may have answered the call otherwise in the parent's
    history, after it ran)."""
    edit = edit or ForkEdit()
    messages = history_before(parent, turn)
    if ledger and parent.mode == "native":
        _recorded_observations(messages, ledger)
    if edit.tool_result is not None:
        _replace_observation(parent, messages, turn - 1, edit.tool_result)
    if edit.message is not None:
        messages.append(ChatMessage(role="user", content=edit.message, pinned=True))
    steps = [s.model_copy(deep=True) for s in parent.steps if s.iteration < turn]
    state = parent.model_copy(deep=True, update={
        "run_id": run_id, "messages": messages, "steps": steps, "iteration": turn - 1, "phase": "select",
        "status": "running", "pending_calls": [], "refused_calls": [], "pending_reasoning": "",
        "answer": None, "final_answer": None, "error": None, "output": None, "output_attempts": 0,
        "output_feedback": [], "usage": Usage(), "seq": 0, "step_no": 0, "interrupt_cursor": None,
        "started_at": now, "ended_at": None, "rate_limited_since": None, "verify_pending": False,
        "checklist_candidate": None, "parse_retried": False, "thread_id": None, "batch_id": None,
        "batch_cost_budget_usd": None, "webhook_on_done": webhook_on_done,
        "recorded": recorded.model_dump(mode="json"),
        "forked_from": {"run_id": parent.run_id, "turn": turn, "reuse": recorded.policy.reuse,
                        "rebuild_system_prompt": edit.system_prompt is not None,
                        "texts": [t for t in (edit.message, edit.system_prompt) if t]},
    })
    if edit.model is not None:
        state.model = edit.model
    if edit.system_prompt is not None:
        state.system_prompt = edit.system_prompt
    _recount(state)
    return state


def _recorded_observations(messages: list[ChatMessage], ledger: dict[str, dict[str, Any]]) -> None:
    for m in messages:
        rec = ledger.get(m.tool_call_id or "") if m.role == "tool" else None
        if rec is not None and rec.get("status") == "done" and rec.get("outcome"):
            m.content = llm_observation(ToolOutcome.model_validate(rec["outcome"]))


def _replace_observation(parent: RunState, messages: list[ChatMessage], turn: int, edit: ToolResultEdit) -> None:
    """``edit``'s call must be one of turn ``turn``'s (the one before the fork's first)."""
    ids = {c.id for t, c in run_calls(parent) if t == turn}
    if edit.tool_call_id not in ids:
        raise RequestError(f"edit.tool_result.tool_call_id: {edit.tool_call_id!r} is not a call of turn {turn} "
                           f"(the turn before the fork's first); its calls: {', '.join(sorted(ids)) or 'none'}",
                           field="edit.tool_result.tool_call_id")
    if parent.mode == "native":
        for m in messages:
            if m.role == "tool" and m.tool_call_id == edit.tool_call_id:
                m.content = edit.observation
                return
    else:  # JSON mode: one call a turn, its observation is the user message after the reply
        reply = reply_indexes(parent)[turn - 1]
        for m in messages[reply + 1:]:
            if m.role == "user" and isinstance(m.content, str) and m.content.startswith("Observation: "):
                m.content = f"Observation: {edit.observation}"
                return
    raise RequestError(f"edit.tool_result.tool_call_id: call {edit.tool_call_id!r} has no observation in the "
                       "history", field="edit.tool_result.tool_call_id")


def _recount(state: RunState) -> None:
    """The loop's counters as the kept steps left them (cycles, tool turns, the trace)."""
    calls = [s for s in state.steps if s.type == "tool_call"]
    state.tool_call_count = (len({s.iteration for s in calls}) if state.mode == "native" else len(calls))
    state.cycle_counts = {}
    state.trace = []
    for s in calls:
        key = f"{s.tool_name}:{md5_args(s.tool_args)}"
        state.cycle_counts[key] = state.cycle_counts.get(key, 0) + 1
        result = f"Error: {s.error}" if s.error is not None else (s.observation or "")
        state.trace += [f"Tool call: {s.tool_name}({text_json(s.tool_args)})", f"Tool result: {result}"]
    state.checklist_fired = any(m.content == P.COMPLETION_CHECKLIST for m in state.messages)
    state.steps = [s for s in state.steps if s.type == "tool_call"]


def fork_reuse(state: RunState) -> Reuse:
    return (state.forked_from or {}).get("reuse", "effects")  # type: ignore[no-any-return]


def fork_event_data(state: RunState) -> dict[str, Any]:
    """The ``fork`` event's payload (the fork's first event)."""
    ff = state.forked_from or {}
    return {"forked_from": {"run_id": ff.get("run_id"), "turn": ff.get("turn")}, "reuse": fork_reuse(state)}


def resume(state: RunState, schemas: list[dict[str, Any]], *, now: float) -> None:
    """The fork's first step after its guardrails: its system prompt rebuilt when the fork
    changed it, then turn N's LLM call."""
    ff = state.forked_from or {}
    if ff.get("rebuild_system_prompt") and state.messages and state.messages[0].role == "system":
        state.messages[0] = ChatMessage(role="system", content=P.system_prompt(
            state.mode, schemas, now=now, extra=state.system_prompt))
    state.phase = "llm"


def edited_texts(state: RunState) -> list[str]:
    """The texts a fork's edits give the model (its ``RUN_START`` guardrails check them as
    they check the query); none for a run that is not a fork."""
    return list((state.forked_from or {}).get("texts") or [])
