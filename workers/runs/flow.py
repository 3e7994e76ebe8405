"""Flow control in the Celery shell: the step boundary's side of ``reactq.shared.flow``.

Before a step that calls a model (tool selection, a loop turn, the synthesis) ``gate``:

* ends the run on the budget path when its recorded spend (``tokens_spent`` in the run
  hash, written by the LLM middleware after every paid call) reached its ``token_budget``,
  or its dollars a dollar cap (the run's ``cost_budget_usd``; its batch's ``cost_budget_usd``
  and its tenant's day, each with what the calls in flight hold, this call's worst case held
  if it goes on);
* asks the limiter to admit the step's call. Admitted: the ticket rides in the step's
  ``FlowScope`` and the middleware uses it. Not admitted: the step is committed with one
  ``phase {phase:"rate_limited", model, wait_s}`` event (only the first time it waits) and
  sent again with a countdown — the worker slot is free meanwhile, and the run keeps its
  place in the model's waiting line (the limiter's line, by arrival).

A ``RateLimited`` raised inside a step (a provider 429, or a helper call such as compaction
that found no capacity) is handled the same way from the last committed state. The dollar
caps ride in the step's ``FlowScope`` too: the middleware holds every further call of the
step (a structured-output level or repair, compaction, a retry) against them, and a
``CostCapReached`` it raises ends the run on the budget path (``cap_stop``).

Celery messages of ``batch`` runs carry a lower priority (kombu's Redis transport keeps one
list per priority step and pops ``0`` first), so interactive steps are taken first.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, assert_never

from reactq.shared.engine import flowcontrol, loop
from reactq.shared.engine.next import Answer, CallLLM, Done, RunTools, SelectTools, next_step
from reactq.shared.engine.state import RunState
from reactq.shared.engine.deps import EngineDeps
from reactq.shared.engine.synthesis import synthesis_messages
from reactq.shared.errors import CostCapReached, RateLimited
from reactq.shared.events import Event
from reactq.shared.stores.flow import Denied, Limits, Ticket
from reactq.shared.flow.middleware import FlowScope, LimitedLLM, admit_now, estimate_tokens, flow_scope
from reactq.shared.llm.base import LLM
from reactq.shared.llm.pricing import Price, reserve_cost
from reactq.shared.stores.due import run_member
from reactq.shared.stores.roundtrip import Read, checked, execute, failed, take
from reactq.shared.stores.run_hash import spending_op
from reactq.shared.settings import Settings
from reactq.shared.tenants.quotas import quota_of
from reactq.shared.wire import message_priorities
from reactq.workers import metrics

if TYPE_CHECKING:
    from reactq.workers.runtime import Runtime

log = logging.getLogger(__name__)
T = TypeVar("T")

# Only the broker's kind matters here (RabbitMQ or Redis): no connection is made at import.
PRIORITY = message_priorities(Settings().broker_url or "")

_message_priority: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "reactq_message_priority", default=None)


def message_priority() -> int | None:
    """The Celery priority for messages sent by the step running now (None = default)."""
    return _message_priority.get()


def set_message_priority(state: RunState | None) -> None:
    _message_priority.set(PRIORITY.get(state.priority, 0) if state is not None else None)


def with_pause(rt: Runtime, read: Read[T], seen: dict[str, Any]) -> Read[T]:
    """The step's first read, carrying the pause of the model this process last called
    without limits (``FlowLimiter.pause_read``): the step's admission then costs no round trip."""
    got = rt.flow.limiter.pause_read()
    if got is None:
        return read
    model, op = got

    def parse(replies: list[Any]) -> T:
        seen[model] = replies[-1]
        return read.parse(replies[:-1])

    return Read([*read.ops, op], parse)


def spent(rt: Runtime, run_id: str) -> int:
    """The run's recorded spend, with the spends still deferred in this step sent first."""
    return spending(rt, run_id)[0]


def spending(rt: Runtime, run_id: str) -> tuple[int, float]:
    """The run's recorded (tokens, dollars), the spends still deferred in this step sent first."""
    replies = execute(rt.redis, [*take(), spending_op(rt.keys, run_id)])
    failed(replies[:-1])
    tokens, cost = checked(replies[-1])
    return int(tokens or 0), float(cost or 0.0)


def _step_call(state: RunState, deps: EngineDeps, scope: FlowScope) -> tuple[LLM, int] | None:
    """The model the step is about to call and its estimated tokens (None: no call; 0 tokens
    where nothing holds them: ``LimitedLLM.counts_ahead``)."""
    nxt = next_step(state)
    match nxt:
        case SelectTools():
            if not loop.needs_selection(state, deps.config):
                return None
            llm = deps.selection_llm or deps.llm
            return llm, len(state.query) // 4 + 30 * len(state.available_tools) + _completion(llm)
        case CallLLM():
            if not _counts_ahead(deps.llm, scope):
                return deps.llm, 0
            return deps.llm, estimate_tokens(state.messages, deps.schemas(state), None, _completion(deps.llm))
        case Answer():
            if not _counts_ahead(deps.llm, scope):
                return deps.llm, 0
            return deps.llm, estimate_tokens(synthesis_messages(state), None, None, _completion(deps.llm))
        case RunTools() | Done():
            return None
        case _:
            assert_never(nxt)


def _counts_ahead(llm: LLM, scope: FlowScope) -> bool:
    return llm.counts_ahead(scope) if isinstance(llm, LimitedLLM) else scope.capped


def _completion(llm: LLM) -> int:
    """The completion tokens to reserve for a call to ``llm``."""
    return llm.flow.completion_estimate if isinstance(llm, LimitedLLM) else 512


class Gate:
    """What ``gate`` decided: go on (with the scope to run the step in), or stop here."""

    def __init__(self, scope: FlowScope | None = None, events: list[Event] | None = None,
                 wait: RateLimited | None = None) -> None:
        self.scope = scope
        self.events = events  # the budget path's events (commit them; the run is done)
        self.wait = wait  # not admitted: defer the step


def gate(rt: Runtime, state: RunState, deps: EngineDeps) -> Gate:
    """Decide at the step boundary (see the module doc)."""
    quota = quota_of(rt.settings, state.tenant)
    scope = FlowScope(run_id=state.run_id, tenant=state.tenant, priority=state.priority, defer=True,
                      tenant_limits=Limits(rpm=quota.rpm, tpm=quota.tpm) if quota.rpm or quota.tpm else None,
                      cost_per_day_usd=quota.cost_per_day_usd, cost_budget_usd=state.cost_budget_usd,
                      batch_id=state.batch_id, batch_cost_budget_usd=state.batch_cost_budget_usd)
    call = _step_call(state, deps, scope)
    # Every step that calls a model — tool selection too — is checked against the caps first.
    if call is None:
        return Gate(scope=scope)
    stop = _budget_stop(rt, state, deps, scope, call)
    if stop is not None:
        return Gate(events=stop)
    scope.held_at_gate = scope.capped  # the checks and holds just made serve the first call
    llm, tokens = call
    for _ in range(100):  # short waits are waited out here; long ones free the slot
        got = admit_now(llm, tokens, member=state.run_id, priority=state.priority)
        if got is None or isinstance(got, Ticket):
            if got is not None:
                scope.tickets[llm.name] = got
            if state.rate_limited_since is not None:  # the wait is over
                flowcontrol.admitted(state)
            return Gate(scope=scope)
        assert isinstance(got, Denied) and isinstance(llm, LimitedLLM)
        llm.flow.note("wait", model=llm.name, priority=state.priority, seconds=got.wait_s)
        if got.wait_s > llm.flow.inline_wait_s:
            return Gate(wait=RateLimited(llm.name, got.wait_s, got.reason))
        time.sleep(got.wait_s)
    return Gate(wait=RateLimited(llm.name, 1.0, "busy"))


def may_stop(rt: Runtime, state: RunState) -> bool:
    """Whether a cap could end the run at its next gate (a token or dollar budget, its batch's
    dollar budget, or its tenant's daily cost cap)."""
    return (state.token_budget is not None or state.cost_budget_usd is not None
            or state.batch_cost_budget_usd is not None
            or quota_of(rt.settings, state.tenant).cost_per_day_usd is not None)


def _budget_stop(rt: Runtime, state: RunState, deps: EngineDeps, scope: FlowScope,
                 call: tuple[LLM, int]) -> list[Event] | None:
    """The budget path's events when a cap is reached before the step's call, else None:
    the run's tokens as recorded (every settled call), then the dollar caps through the same
    check every call makes (``Runtime.flow``'s ``on_reserve``: the run's dollars, its batch's
    spend and its tenant's day, with this call's worst case held in each if it goes on)."""
    now = deps.clock()
    if state.token_budget is not None:
        used = spent(rt, state.run_id)
        if flowcontrol.budget_reached(state, used):
            metrics.budget_stop(rt.recorder, "run")
            return flowcontrol.stop_for_budget(state, used, now=now)
    if not scope.capped or rt.flow.on_reserve is None:
        return None
    try:
        rt.flow.on_reserve(scope, _worst_case(*call))
    except CostCapReached as cap:
        return cap_stop(rt, state, cap, now=now)
    return None


def cap_stop(rt: Runtime, state: RunState, cap: CostCapReached, *, now: float) -> list[Event]:
    """The budget path's events for a call a dollar cap refused inside a step."""
    metrics.budget_stop(rt.recorder, f"{cap.whose}_cost")
    return flowcontrol.stop_for_cost(state, cap.spent_usd, cap.cap_usd, cap.whose, now=now)


def _worst_case(llm: LLM, tokens: int) -> float:
    """A call's reservation in dollars: its prompt estimate and completion allowance at the
    model's price (0 for a model without one: the door refuses caps over those)."""
    price = getattr(llm, "price", None)
    if not isinstance(price, Price):
        return 0.0
    completion = _completion(llm)
    return reserve_cost(max(0, tokens - completion), completion, price)


@contextmanager
def scoped(gate_: Gate) -> Iterator[FlowScope | None]:
    """Run the step in the gate's scope; give back tickets the step did not use."""
    if gate_.scope is None:
        yield None
        return
    with flow_scope(gate_.scope) as scope:
        try:
            yield scope
        finally:
            for ticket in list(scope.tickets.values()):
                _release(ticket)
            scope.tickets.clear()


def discard(gate_: Gate | None) -> None:
    """A gate passed ahead of a step that will not run here: give back its tickets."""
    if gate_ is not None and gate_.scope is not None:
        for ticket in list(gate_.scope.tickets.values()):
            _release(ticket)
        gate_.scope.tickets.clear()


def _release(ticket: Ticket) -> None:
    from reactq.workers.runtime import runtime

    rt = runtime()
    llm = rt.models.get(ticket.model) if ticket.model in rt.models else None
    if isinstance(llm, LimitedLLM):
        try:
            llm.flow.limiter.settle(ticket, llm.limits, 0, learn=False)
        except Exception:
            log.debug("unused ticket not released", exc_info=True)


def deferred_events(state: RunState, wait: RateLimited, published_seq: int, now: float) -> list[Event]:
    """The events of a step that waits: seqs continue after what was already published."""
    state.seq = max(state.seq, published_seq)
    return flowcontrol.rate_limited(state, wait.model, wait.wait_s, now=now)


def send_later(rt: Runtime, task: str, args: list[Any], queue: str, countdown: float,
               state: RunState) -> None:
    """Enqueue with a countdown (the worker's timer holds it, not a thread), and park the
    run in the lease table so that it is resumed even if that worker dies meanwhile."""
    from reactq.workers.app import app

    park(rt, state.run_id, task, queue, countdown)
    app.send_task(task, args=args, queue=queue, countdown=max(0.0, countdown),
                  priority=PRIORITY.get(state.priority, 0), argsrepr=repr(args), kwargsrepr="{}")


def park(rt: Runtime, run_id: str, task: str, queue: str, wait_s: float) -> None:
    """A waiting run stays due (``shared/stores/due.py``), with its deadline pushed past its wait (+ a
    margin): a countdown message dies with the worker that holds it (until the broker's
    visibility timeout), so if the step has not started by then, a watchdog resends it; and
    no watchdog resends it early while it waits. ``task``/``queue`` are what the watchdog
    sends anyway (the run's current step)."""
    margin = max(5.0, 3 * rt.settings.lease_seconds)
    rt.redis.zadd(rt.keys.due, {run_member(run_id): int((time.time() + wait_s + margin) * 1000)})

