"""Flow control as middleware around an ``LLM`` (dramatiq-style): the engine never sees it.

``LimitedLLM`` wraps a model of the registry. Every call — the loop's ``chat``, the
structured-call levels, tool selection, compaction and the streamed synthesis — goes
through it, so all of them:

1. are admitted by the cluster-wide limiter (``FlowLimiter``) with their estimated tokens
   (prompt estimate + ``max_tokens``, else ``completion_estimate``);
2. wait in place when the start is near (≤ ``inline_wait_s``), and otherwise raise
   ``RateLimited`` when the caller can be resumed later (``FlowScope.defer``: the Celery
   shell gives the worker slot back and sends the step again) — or sleep (in-process);
3. hold their worst case in dollars against the dollar caps of their scope (``on_reserve``:
   the run's ``cost_budget_usd``, its batch's ``cost_budget_usd``, its tenant's
   ``cost_per_day_usd``) — a cap reached raises ``CostCapReached`` and the call is not made —
   and, after the call, settle the reservation with the usage the provider reported and add
   what was paid to the spend (``on_spend`` / ``on_cost``: the run hash, the batch's spend and
   the tenant's day, so a worker crash does not reset it);
4. turn a provider 429 (or 503 with ``Retry-After``) into a pause of that model for every
   worker, with the SDK's own retry of it switched off (no stampede).

Who is calling is set by the shell with ``flow_scope(...)`` (a context variable): run id (or
the DAG whose own calls these are), priority, the dollar caps, and possibly a ticket already
admitted at the step boundary. Every attempt — a retry after a provider 429, each level and
repair of a structured call — is a call of its own: admitted, reserved and settled.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import random
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from reactq.shared.errors import LLMError, RateLimited
from reactq.shared.stores.caps import DollarCaps
from reactq.shared.stores.flow import Denied, FlowLimiter, Limits, Priority, Ticket
from reactq.shared.llm.base import LLM, DelegatingLLM
from reactq.shared.llm.pricing import Price, reserve_cost
from reactq.shared.models import ChatMessage, LLMResult, StreamChunk

log = logging.getLogger(__name__)

#: Seconds a 429 without ``Retry-After`` pauses the model.
DEFAULT_PAUSE_S = 1.0


@dataclass
class FlowScope:
    """Who is calling: set by the shell around one step."""

    run_id: str | None = None
    tenant: str = "default"
    """Whose calls these are (cost metrics, the tenant's quotas)."""
    priority: Priority = "interactive"
    defer: bool = False
    """True: a long wait raises ``RateLimited`` (the shell resumes the step later)."""
    tickets: dict[str, Ticket] = field(default_factory=dict)
    """Calls admitted at the step boundary, by model name; the next call uses one."""
    tenant_limits: Limits | None = None
    """The tenant's ``rpm`` / ``tpm`` across all its runs (``REACTQ_TENANTS``): every call is
    admitted by the limiter under ``tenant_flow_name(tenant)`` as well as by its model's."""
    tenant_tickets: dict[str, Ticket] = field(default_factory=dict)
    """The tenant's ticket of each model ticket in use (by the model ticket's call id)."""
    spender: str | None = None
    """Who pays in the tenant's day (its reservations' member): ``run_id`` when unset; a
    DAG's own calls (planner, analyzer, synthesis) use ``dag:<id>``."""
    cost_per_day_usd: float | None = None
    """The tenant's daily dollar cap (``REACTQ_TENANTS``), held before every call."""
    cost_budget_usd: float | None = None
    """The run's own dollar cap (``RunRequest.cost_budget_usd``), checked before every call."""
    batch_id: str | None = None
    """The batch whose spend holds these calls (with ``batch_cost_budget_usd``)."""
    batch_cost_budget_usd: float | None = None
    """The batch's dollar cap over all its runs, held before every call."""
    held_at_gate: bool = False
    """The step boundary already checked the caps and held the step's first call (like a
    ticket): that call reserves nothing more; the calls after it do."""

    @property
    def member(self) -> str | None:
        """The spender of these calls (the tenant's day, the run's spend)."""
        return self.spender or self.run_id

    @property
    def capped(self) -> bool:
        return (self.cost_per_day_usd is not None or self.cost_budget_usd is not None
                or self.batch_cost_budget_usd is not None)

    @property
    def batch_cap(self) -> tuple[str, float] | None:
        """The batch whose spend holds these calls, and its cap (None: no batch cap)."""
        if self.batch_id is None or self.batch_cost_budget_usd is None:
            return None
        return self.batch_id, self.batch_cost_budget_usd

    @property
    def caps(self) -> DollarCaps:
        """Every dollar cap over these calls, as one value."""
        return DollarCaps(run_usd=self.cost_budget_usd, batch=self.batch_cap,
                          tenant_day_usd=self.cost_per_day_usd)


def tenant_flow_name(tenant: str) -> str:
    """The limiter's name for a tenant's own limits (``flow:{tenant:<name>}`` keys)."""
    return f"tenant:{tenant}"


_scope: contextvars.ContextVar[FlowScope | None] = contextvars.ContextVar("reactq_flow", default=None)


@contextmanager
def flow_scope(scope: FlowScope) -> Iterator[FlowScope]:
    token = _scope.set(scope)
    try:
        yield scope
    finally:
        _scope.reset(token)


def current_scope() -> FlowScope:
    return _scope.get() or FlowScope()


def estimate_tokens(messages: list[ChatMessage], tools: list[dict[str, Any]] | None,
                    max_tokens: int | None, completion_estimate: int) -> int:
    """A cheap upper-ish estimate: ≈ 4 characters a token, 4 tokens of overhead a message,
    the tool schemas, plus the completion's ``max_tokens`` (or the configured estimate)."""
    chars = sum(len(m.content if isinstance(m.content, str) else json.dumps(m.content or ""))
                for m in messages)
    chars += sum(len(json.dumps(tc.arguments)) for m in messages for tc in (m.tool_calls or []))
    if tools:
        chars += len(json.dumps(tools))
    return chars // 4 + 4 * len(messages) + (max_tokens or completion_estimate)


def paid_tokens(usage: dict[str, Any] | None) -> int | None:
    if not usage:
        return None
    total = usage.get("total_tokens")
    if total:
        return int(total)
    return int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)


@dataclass
class FlowControl:
    """Process-wide collaborators of every ``LimitedLLM``."""

    limiter: FlowLimiter
    on_spend: Callable[[str, int], None] | None = None
    on_cost: Callable[[FlowScope, float], None] | None = None
    """After every call of a run or a DAG (failed ones too, with 0): its dollars, to settle
    the reservation ``on_reserve`` made (``reactq.shared.stores.spend``)."""
    on_reserve: Callable[[FlowScope, float], None] | None = None
    """Before every call of a scope with a dollar cap: hold the call's worst case (dollars)
    for ``scope.member``; raises ``CostCapReached`` when a cap is reached."""
    on_event: Callable[[str, dict[str, Any]], None] | None = None
    """Metrics: ``("wait"|"provider_429"|"settle", fields)``; must never raise."""
    completion_estimate: int = 512
    inline_wait_s: float = 0.25

    def note(self, kind: str, **fields: Any) -> None:
        if self.on_event is not None:
            try:
                self.on_event(kind, fields)
            except Exception:  # metrics never fail a call
                log.debug("flow metric %s not recorded", kind, exc_info=True)


def _no_sdk_rate_limit_retry(llm: Any) -> None:
    """Switch the SDK's own 429 retry off on the client under any wrappers (metering reads
    attributes through, so look at each object's own ``__dict__``)."""
    obj = llm
    while obj is not None:
        own = vars(obj) if hasattr(obj, "__dict__") else {}
        if "retry_rate_limits" in own:
            obj.retry_rate_limits = False
            return
        obj = own.get("_inner")


class LimitedLLM(DelegatingLLM):
    """An ``LLM`` whose calls pass the model's cluster-wide limits (see the module doc)."""

    def __init__(self, inner: LLM, limits: Limits, flow: FlowControl) -> None:
        super().__init__(inner)
        self.limits = limits
        self.flow = flow
        _no_sdk_rate_limit_retry(inner)

    def __repr__(self) -> str:
        return f"LimitedLLM({self._inner!r}, {self.limits})"

    # -- admission ------------------------------------------------------------------------
    async def admit(self, tokens: int) -> Ticket:
        """A ticket for one call (waiting in place, or ``RateLimited`` when deferrable): the
        model's, and the tenant's when it has limits of its own."""
        scope = current_scope()
        while True:
            ticket = await self._admit_model(scope, tokens)
            if scope.tenant_limits is None or not scope.tenant_limits.any:
                return ticket
            got = self.flow.limiter.acquire(tenant_flow_name(scope.tenant), scope.tenant_limits,
                                            member=scope.run_id or ticket.call_id,
                                            priority=scope.priority, tokens=tokens)
            if isinstance(got, Ticket):
                scope.tenant_tickets[ticket.call_id] = got
                await _sleep(got.start_in)
                return ticket
            self._release(ticket)  # the model's place goes to a call its tenant allows
            self.flow.note("wait", model=tenant_flow_name(scope.tenant), priority=scope.priority,
                           seconds=got.wait_s)
            if scope.defer and got.wait_s > self.flow.inline_wait_s:
                raise RateLimited(tenant_flow_name(scope.tenant), got.wait_s, got.reason)
            await _sleep(got.wait_s)

    def _release(self, ticket: Ticket) -> None:
        try:
            self.flow.limiter.settle(ticket, self.limits, 0, learn=False)
        except Exception:
            log.debug("flow release failed", exc_info=True)

    def _settle_tenant(self, ticket: Ticket, actual: int) -> None:
        scope = current_scope()
        held = scope.tenant_tickets.pop(ticket.call_id, None)
        if held is None or scope.tenant_limits is None:
            return
        try:
            self.flow.limiter.settle(held, scope.tenant_limits, actual, learn=False, later=actual > 0)
        except Exception:
            log.debug("tenant flow settle failed", exc_info=True)

    async def _admit_model(self, scope: FlowScope, tokens: int) -> Ticket:
        pre = scope.tickets.pop(self.name, None)
        if pre is not None:
            await _sleep(pre.start_in)
            return pre
        member = scope.run_id or f"anon:{id(asyncio.current_task())}"
        while True:
            # One Redis round trip (≈ 0.1 ms): not worth a thread hop.
            got = self.flow.limiter.acquire(self.name, self.limits, member=member,
                                            priority=scope.priority, tokens=tokens)
            if isinstance(got, Ticket):
                await _sleep(got.start_in)
                return got
            self.flow.note("wait", model=self.name, priority=scope.priority, seconds=got.wait_s)
            if scope.defer and got.wait_s > self.flow.inline_wait_s:
                raise RateLimited(self.name, got.wait_s, got.reason)
            await _sleep(got.wait_s)

    def _settle(self, ticket: Ticket, usage: dict[str, Any] | None) -> None:
        paid = paid_tokens(usage)
        actual = ticket.reserved if paid is None else paid
        try:
            self.flow.limiter.settle(ticket, self.limits, actual, learn=paid is not None, later=True)
        except Exception as exc:  # the lease on the slot expires by itself
            log.warning("flow settle failed for %s: %s", self.name, exc)
        self.flow.note("settle", model=self.name, reserved=ticket.reserved, actual=actual)
        self._settle_tenant(ticket, actual)
        scope = current_scope()
        run_id = scope.run_id
        if paid and run_id and self.flow.on_spend is not None:
            self.flow.on_spend(run_id, paid)
        self._cost(scope, float((usage or {}).get("cost_usd") or 0.0))

    def reserve(self, tokens: int) -> None:
        """Hold this call's worst case against its scope's dollar caps (``CostCapReached``:
        the call is not made). A model without a price holds nothing: the door refuses caps
        over such models."""
        scope = current_scope()
        if not scope.capped or scope.member is None or self.flow.on_reserve is None:
            return
        if scope.held_at_gate:
            scope.held_at_gate = False
            return
        price = getattr(self, "price", None)
        completion = self.flow.completion_estimate
        worst = reserve_cost(max(0, tokens - completion), completion, price) if isinstance(price, Price) else 0.0
        self.flow.on_reserve(scope, worst)

    def _cost(self, scope: FlowScope, cost: float) -> None:
        if scope.member and self.flow.on_cost is not None:
            try:
                self.flow.on_cost(scope, cost)
            except Exception as exc:  # the spend is the run's: never fail the call here
                log.warning("cost of a call of %s not recorded: %s", self.name, exc)

    def _failed(self, ticket: Ticket, exc: BaseException) -> BaseException:
        """Free the reservation; a provider 429/503 pauses the model for everyone."""
        try:
            self.flow.limiter.settle(ticket, self.limits, 0, learn=False)
        except Exception:
            log.debug("flow settle after failure failed", exc_info=True)
        self._settle_tenant(ticket, 0)
        self._cost(current_scope(), 0.0)
        status = getattr(exc, "status_code", None)
        retry_after = getattr(exc, "retry_after", None)
        if status == 429 or (status == 503 and retry_after is not None):
            wait = retry_after if retry_after is not None else DEFAULT_PAUSE_S
            self.flow.limiter.pause(self.name, wait)
            self.flow.note("provider_429", model=self.name, status=status)
            # Spread the return of everybody the pause stopped a little.
            return RateLimited(self.name, wait + random.uniform(0, 0.05), f"provider {status}")
        return exc

    async def _retrying(self, call: Callable[[], Any], tokens: int) -> tuple[Ticket, Any]:
        while True:
            self.reserve(tokens)
            try:
                ticket = await self.admit(tokens)
            except BaseException:
                self._cost(current_scope(), 0.0)  # not admitted: release the reservation
                raise
            try:
                return ticket, await call()
            except LLMError as exc:
                err = self._failed(ticket, exc)
                if not isinstance(err, RateLimited):
                    raise
                if current_scope().defer and err.wait_s > self.flow.inline_wait_s:
                    raise err from exc
                log.info("%s; waiting in place", err)
                # The pause is in Redis now: admit() waits for it like every other worker.
            except BaseException as exc:
                self._failed(ticket, exc)
                raise

    # -- the LLM protocol ---------------------------------------------------------------------
    def counts_ahead(self, scope: FlowScope) -> bool:
        """Whether a call's tokens must be estimated before it is made: only where something
        holds them (this model's limits, the tenant's, a dollar cap). Otherwise the estimate,
        O(history), would be computed for nothing: a model without limits is admitted on its
        pause alone, and settles what the provider reports."""
        return self.limits.any or scope.capped or (scope.tenant_limits is not None and scope.tenant_limits.any)

    def _estimate(self, messages: list[ChatMessage], kwargs: dict[str, Any]) -> int:
        if not self.counts_ahead(current_scope()):
            return 0
        return estimate_tokens(messages, kwargs.get("tools"), kwargs.get("max_tokens"), self.flow.completion_estimate)

    async def chat(self, messages: list[ChatMessage], **kwargs: Any) -> LLMResult:
        tokens = self._estimate(messages, kwargs)
        ticket, result = await self._retrying(lambda: self._inner.chat(messages, **kwargs), tokens)
        self._settle(ticket, result.usage)
        return result  # type: ignore[no-any-return]

    def stream_chat(self, messages: list[ChatMessage], **kwargs: Any) -> AsyncIterator[StreamChunk]:
        return self._stream(messages, kwargs)

    async def _stream(self, messages: list[ChatMessage], kwargs: dict[str, Any]) -> AsyncIterator[StreamChunk]:
        tokens = self._estimate(messages, kwargs)

        async def first() -> tuple[AsyncIterator[StreamChunk], StreamChunk | None]:
            # The request is sent (and a 429 raised) when the first chunk is awaited.
            it = self._inner.stream_chat(messages, **kwargs).__aiter__()
            try:
                return it, await it.__anext__()
            except StopAsyncIteration:
                return it, None

        ticket, (it, chunk) = await self._retrying(first, tokens)
        usage: dict[str, Any] | None = None
        try:
            while chunk is not None:
                if chunk.usage:
                    usage = chunk.usage
                yield chunk
                try:
                    chunk = await it.__anext__()
                except StopAsyncIteration:
                    chunk = None
        finally:
            self._settle(ticket, usage)


async def _sleep(seconds: float) -> None:
    if seconds > 0:
        await asyncio.sleep(seconds)


def admit_now(llm: LLM, tokens: int, *, member: str, priority: Priority) -> Ticket | Denied | None:
    """For the shell's step boundary: try to admit one call of ``llm`` without waiting.

    ``None`` when the model is not under flow control."""
    if not isinstance(llm, LimitedLLM):
        return None
    return llm.flow.limiter.acquire(llm.name, llm.limits, member=member, priority=priority, tokens=tokens)


def limited_registry(registry: Any, flow: FlowControl) -> Any:
    """A copy of ``registry`` whose every model is a ``LimitedLLM`` (limits from its spec;
    a model without limits is still wrapped: a provider 429 pauses it for every worker)."""
    from reactq.shared.llm.registry import ModelRegistry

    out = ModelRegistry()
    for name in registry.list_models():
        spec = registry.spec_of(name)
        limits = Limits(rpm=spec.rpm, tpm=spec.tpm, max_concurrency=spec.max_concurrency)
        out.register(name, LimitedLLM(registry.get(name), limits, flow), registry.roles_of(name), spec=spec)
    return out
