"""A tool call's ``iteration`` events as data, for whoever publishes them.

In a turn where no call may wait for a person, the turn's ``iteration start`` events go out
at dispatch and its ``iteration done`` events with the fan-in (``loop``). In a turn where one
may (``RunState.held_calls`` is not empty), each call's events follow the call instead:

* a call that may wait has no ``iteration start`` at dispatch. Its first event is ``approval
  {status: "requested"}`` when it waits; after an approve or edit the decision's ``approval``
  event is followed by its ``iteration start`` (with ``approved_args`` for an edit); after a
  reject, a respond or an expiry into reject only its ``iteration done``. One that did not
  wait after all (its PreToolUse hooks did not ask) has its start once its hooks passed;
* every call's ``iteration done`` is published as soon as it completes (after its PostToolUse
  hooks, with the observation the model will see), and the fan-in does not publish it again
  (``ToolOutcome.announced``).

The in-process shell publishes through its ``StepIO``; the Celery shell through the run's
event stream in a script that takes the next seq after what was published
(``shared/stores/approvals.py``).
"""

from __future__ import annotations

from typing import Any

from reactq.shared.engine.state import ToolOutcome
from reactq.shared.models import ToolCallRequest


def start_data(iteration: int, call: ToolCallRequest, reasoning: str = "",
               approved_args: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``step {type: iteration, status: start}`` payload (without its seq)."""
    data: dict[str, Any] = {"type": "iteration", "status": "start", "iteration": iteration,
                            "tool_name": call.name, "tool_args": call.arguments, "tool_call_id": call.id,
                            "reasoning": reasoning}
    if approved_args is not None:
        data["approved_args"] = approved_args
    return data


def done_data(iteration: int, call: ToolCallRequest, out: ToolOutcome, tools_started_at: float,
              now: float) -> dict[str, Any]:
    """The ``step {type: iteration, status: done}`` payload (without its seq)."""
    ended = out.ended_at or now
    extra: dict[str, Any] = {}
    if out.artifacts:
        extra["artifacts"] = [a.model_dump() for a in out.artifacts]
    if out.uncertain:
        extra["uncertain"] = True
    if out.reused:
        extra["reused"] = True  # answered from a recorded ledger: the tool was not executed
    if out.blocked:
        extra["blocked"] = True  # a hook refused the call (the viewer shows it as such)
    extra.update({k: v for k in ("approval", "approved_args") if (v := getattr(out, k)) is not None})
    return {"type": "iteration", "status": "done", "iteration": iteration, "tool_name": call.name,
            "tool_call_id": call.id, "tool_args": call.arguments, "observation": out.observation,
            "error": out.error, "iter_elapsed": round(max(0.0, ended - tools_started_at), 2),
            "content_type": out.content_type, **extra}


def turn_fields(iteration: int, held: list[str], tools_started_at: float) -> dict[str, Any]:
    """What a tool task (or a decision) of a turn with held calls needs to publish its events."""
    return {"held": held, "iteration": iteration, "tools_started_at": tools_started_at} if held else {}


def call_of(turn: dict[str, Any], call_id: str) -> ToolCallRequest | None:
    for c in turn.get("calls", []):
        if c.get("id") == call_id:
            return ToolCallRequest.model_validate(c)
    return None
