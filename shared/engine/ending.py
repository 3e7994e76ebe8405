"""How a run ends: the answer's stream events, then ``finish``, ``fail``, ``cancel`` or
``interrupt``. Each ending leaves ``state.phase == "done"`` with a terminal status, and its
last event is the one ``done``, built from ``result.run_result``.

Pure transitions like ``loop``: the shells decide when a run ends, these say what it means.
"""

from __future__ import annotations

from typing import Any

from reactq.shared.engine import prompts as P
from reactq.shared.engine.loop import emit
from reactq.shared.engine.result import run_result
from reactq.shared.engine.state import RunState
from reactq.shared.errors import CostCapReached
from reactq.shared.events import Event
from reactq.shared.models import ChatMessage


def synthesis_started(state: RunState) -> list[Event]:
    return [emit(state, "answer", status="start")]


def answer_delta(state: RunState, content: str) -> Event:
    return emit(state, "answer", status="delta", content=content)


def fallback_event(state: RunState, error: BaseException | str) -> Event:
    """The ``error`` event of a synthesis that did not give the answer (the loop's answer is
    used): ``synthesis_fallback`` — or, when a dollar cap refused the call, ``budget`` naming
    the cap, as when a cap ends the run."""
    if isinstance(error, CostCapReached):
        return emit(state, "error", kind="budget", cap=error.whose, spent_usd=round(error.spent_usd, 6),
                    cost_budget_usd=error.cap_usd, message=f"{error}; answering with the loop's answer")
    message = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return emit(state, "error", message=f"Answer synthesis failed, using the loop's answer: {message}",
                kind="synthesis_fallback")


def finish(state: RunState, answer: str, *, now: float, pending: list[str] | None = None) -> list[Event]:
    """End a run that produced its answer: ``answer done`` then ``done``."""
    state.final_answer = answer
    state.status = "succeeded"
    state.phase = "done"
    state.ended_at = now
    events = [emit(state, "answer", status="done")]
    return events + [_done(state, pending)]


def fail(state: RunState, error: BaseException | str, *, now: float, kind: str = "llm_error",
         **extra: Any) -> list[Event]:
    """End a run that cannot go on: ``error`` (with ``extra`` fields) then ``done``."""
    message = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    answer_open_calls(state, P.CANCELLED_OBSERVATION)
    state.status = "failed"
    state.phase = "done"
    state.ended_at = now
    state.error = message
    state.final_answer = f"Agent error: {message}"
    return [emit(state, "error", message=message, kind=kind, **extra), _done(state, None)]


def cancel(state: RunState, *, now: float, reason: str = "cancelled by request") -> list[Event]:
    """End a run on request at a step boundary; open tool calls get an answer (valid history)."""
    return _stop(state, now, P.CANCELLED_OBSERVATION, f"Run cancelled: {reason}", "cancelled")


def interrupt(state: RunState, *, now: float, strategy: str) -> list[Event]:
    """End a run because a new message on its thread interrupts it (``interrupt`` or
    ``rollback``): status ``cancelled``; an open tool call is answered as *interrupted*,
    neither as run nor as refused."""
    message = f"Run interrupted: a new message on its thread took over ({strategy})"
    return _stop(state, now, P.INTERRUPTED_OBSERVATION, message, "interrupted", strategy=strategy)


def _stop(state: RunState, now: float, observation: str, message: str, kind: str,
          **extra: Any) -> list[Event]:
    answer_open_calls(state, observation)
    state.status = "cancelled"
    state.phase = "done"
    state.ended_at = now
    # An answer a guardrail has not passed never reaches ``done``.
    state.final_answer = "" if state.answer_guarded else state.answer or ""
    return [emit(state, "error", message=message, kind=kind, **extra), _done(state, None)]


def answer_open_calls(state: RunState, text: str) -> None:
    """Answer every call of the turn that has no result yet.

    Every open call gets its tool message right after the assistant turn that made it,
    so the history stays valid for every provider however the run ends.
    """
    for call in state.pending_calls + state.refused_calls:
        if state.mode == "native":
            state.messages.append(ChatMessage(role="tool", tool_call_id=call.id, name=call.name, content=text))
        elif text == P.INTERRUPTED_OBSERVATION:
            state.messages.append(ChatMessage(role="user", content=f"Observation: {text}"))
        else:
            state.messages.append(ChatMessage(role="user", content=f"Observation: Error: {text}"))
    state.pending_calls, state.refused_calls = [], []


def _done(state: RunState, pending: list[str] | None) -> Event:
    """The ``done`` event: the run's result, its id, and the messages it never read."""
    result = run_result(state)
    data: dict[str, Any] = {
        "answer": result.answer,
        "iterations": result.iterations,
        "usage": result.usage,
        "elapsed": result.elapsed,
        "status": result.status,
        "run_id": state.run_id,
        "output": result.output,
    }
    if pending:
        data["pending_injections"] = pending
    return emit(state, "done", **data)
