"""Flow control's transitions: waiting for model capacity, and the token budget's ending.

The shell decides when (``workers/runs/flow.py`` asks the limiter and reads the spend); these
say what happens to the run.
"""

from __future__ import annotations

from reactq.shared.engine import prompts as P
from reactq.shared.engine.ending import answer_delta, answer_open_calls, fail, finish, synthesis_started
from reactq.shared.engine.loop import emit, to_answer
from reactq.shared.engine.result import step_summary
from reactq.shared.engine.state import RunState
from reactq.shared.engine.synthesis import fallback_chunks
from reactq.shared.errors import cap_name
from reactq.shared.events import Event


def rate_limited(state: RunState, model: str, wait_s: float, *, now: float) -> list[Event]:
    """The step must wait for model capacity: one ``phase`` event per wait."""
    if state.rate_limited_since is not None:
        return []
    state.rate_limited_since = now
    return [emit(state, "phase", phase="rate_limited", model=model, wait_s=round(wait_s, 3))]


def admitted(state: RunState) -> None:
    """The wait (if any) is over."""
    state.rate_limited_since = None


def budget_reached(state: RunState, spent: int) -> bool:
    return state.token_budget is not None and spent >= state.token_budget


def stop_for_budget(state: RunState, spent: int, *, now: float) -> list[Event]:
    """The run's token budget is used up: no further LLM call. The answer is the
    max-iterations summary text itself, streamed as-is; the run ``succeeded`` like
    the other fallbacks, with an ``error`` event ``kind: "budget"``. A run with an
    ``output_schema`` ends ``failed`` instead (its answer must be JSON valid against it)."""
    if state.output_schema is not None:
        # A typed answer cannot be the summary text: the run fails, naming the budget.
        return fail(state, f"Token budget reached: {spent} of {state.token_budget} tokens used "
                           "before the answer was valid against output_schema",
                    now=now, kind="budget", spent=spent, token_budget=state.token_budget)
    answer_open_calls(state, P.CANCELLED_OBSERVATION)
    error = emit(state, "error", kind="budget", spent=spent, token_budget=state.token_budget,
                 message=f"Token budget reached: {spent} of {state.token_budget} tokens used; "
                         "answering with what was gathered so far")
    return _summary_ending(state, error, now)


def cost_reached(state: RunState, spent_usd: float) -> bool:
    return state.cost_budget_usd is not None and spent_usd >= state.cost_budget_usd


def stop_for_cost(state: RunState, spent_usd: float, cap_usd: float, whose: str, *, now: float) -> list[Event]:
    """A dollar cap is reached — the run's ``cost_budget_usd`` (``whose="run"``), its batch's
    (``"batch"``) or its tenant's ``cost_per_day_usd`` (``"tenant"``): no further call, the summary path as for
    the token budget, an ``error`` event ``kind: "budget"`` naming the cap."""
    answer_open_calls(state, P.CANCELLED_OBSERVATION)
    what = cap_name(whose)
    error = emit(state, "error", kind="budget", cap=whose, spent_usd=round(spent_usd, 6),
                 cost_budget_usd=cap_usd,
                 message=f"{what} reached: ${spent_usd:.4f} of ${cap_usd:.4f} spent; "
                         "answering with what was gathered so far")
    return _summary_ending(state, error, now)


def _summary_ending(state: RunState, error: Event, now: float) -> list[Event]:
    """The summary answer, streamed as it is; with an ANSWER guardrail it is only set, and the
    answer step (no model call: ``answer_ready``) publishes it once the guardrails passed it."""
    text = P.MAX_ITERATIONS_ANSWER.format(n=state.iteration) + step_summary(state)
    events = [error]
    if state.phase != "answer":
        events += to_answer(state, text)
    state.answer = text
    if state.answer_guarded:
        state.answer_ready = True
        return events
    events += synthesis_started(state)
    events += [answer_delta(state, c) for c in fallback_chunks(text)]
    return events + finish(state, text, now=now)
