"""The LLM middleware: admission, settlement, spend, provider 429s (fakeredis[lua])."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest

from reactq.shared.errors import LLMError, RateLimited
from reactq.shared.stores.flow import FlowLimiter, Limits
from reactq.shared.flow.middleware import FlowControl, FlowScope, LimitedLLM, flow_scope
from reactq.shared.keys import Keys
from reactq.shared.models import ChatMessage, LLMResult, StreamChunk

USAGE = {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}


class Fake:
    name = "m"
    abilities: dict[str, bool] = {}
    context_size = None

    def __init__(self, fail: list[BaseException] | None = None) -> None:
        self.fail = list(fail or [])
        self.calls = 0

    async def chat(self, messages: list[ChatMessage], **kw: Any) -> LLMResult:
        self.calls += 1
        if self.fail:
            raise self.fail.pop(0)
        return LLMResult(message=ChatMessage(role="assistant", content="ok"), usage=dict(USAGE))

    def stream_chat(self, messages: list[ChatMessage], **kw: Any) -> AsyncIterator[StreamChunk]:
        async def gen() -> AsyncIterator[StreamChunk]:
            self.calls += 1
            if self.fail:
                raise self.fail.pop(0)
            yield StreamChunk(delta_content="hi")
            yield StreamChunk(finish_reason="stop", usage=dict(USAGE))
        return gen()


def _429(retry_after: float | None) -> LLMError:
    err = LLMError("HTTP 429")
    err.status_code = 429  # type: ignore[attr-defined]
    err.retry_after = retry_after  # type: ignore[attr-defined]
    return err


@pytest.fixture
def setup() -> tuple[FlowLimiter, dict[str, int], FlowControl]:
    r = fakeredis.FakeRedis()
    lim = FlowLimiter(r, Keys("t:"))
    spent: dict[str, int] = {}
    flow = FlowControl(limiter=lim, on_spend=lambda rid, n: spent.__setitem__(rid, spent.get(rid, 0) + n),
                       inline_wait_s=0.25)
    return lim, spent, flow


MSGS = [ChatMessage(role="user", content="hello")]


async def test_a_call_is_settled_and_paid_into_the_runs_spend(setup) -> None:
    lim, spent, flow = setup
    llm = LimitedLLM(Fake(), Limits(rpm=600, tpm=60_000), flow)
    with flow_scope(FlowScope(run_id="r1")):
        await llm.chat(MSGS)
        chunks = [c async for c in llm.stream_chat(MSGS)]
    assert chunks[-1].usage == USAGE
    assert spent == {"r1": 80}
    use = lim.usage("m")
    assert (use["rpm_used"], use["tpm_used"], use["reserved_tokens"]) == (2, 80, 0)


async def test_a_provider_429_pauses_the_model_and_defers_the_step(setup) -> None:
    lim, spent, flow = setup
    fake = Fake(fail=[_429(2.0)])
    llm = LimitedLLM(fake, Limits(), flow)  # no limits: a 429 still pauses everyone
    with flow_scope(FlowScope(run_id="r1", defer=True)), pytest.raises(RateLimited) as info:
        await llm.chat(MSGS)
    assert info.value.wait_s >= 2.0 and info.value.model == "m"
    assert fake.calls == 1 and spent == {}
    assert lim.usage("m")["paused_for_s"] > 1.5
    other = LimitedLLM(Fake(), Limits(), flow)  # another worker's client for the same model
    with flow_scope(FlowScope(run_id="r2", defer=True)), pytest.raises(RateLimited):
        await other.chat(MSGS)


async def test_a_short_retry_after_is_waited_out_in_place(setup) -> None:
    lim, spent, flow = setup
    fake = Fake(fail=[_429(0.05)])
    llm = LimitedLLM(fake, Limits(), flow)
    with flow_scope(FlowScope(run_id="r1", defer=True)):
        await llm.chat(MSGS)
    assert fake.calls == 2 and spent == {"r1": 40}


async def test_other_errors_pass_through_and_free_the_reservation(setup) -> None:
    lim, spent, flow = setup
    boom = LLMError("HTTP 500")
    boom.status_code = 500  # type: ignore[attr-defined]
    llm = LimitedLLM(Fake(fail=[boom]), Limits(max_concurrency=1), flow)
    with pytest.raises(LLMError):
        await llm.chat(MSGS)
    assert lim.usage("m")["in_flight"] == 0 and lim.usage("m")["reserved_tokens"] == 0


async def test_a_tenants_rpm_paces_its_calls_whatever_the_model_allows(setup) -> None:
    import time

    lim, _, flow = setup
    llm = LimitedLLM(Fake(), Limits(), flow)  # the model itself is unlimited
    scope = FlowScope(run_id="r1", tenant="acme", tenant_limits=Limits(rpm=600))
    started = time.monotonic()
    with flow_scope(scope):
        for _ in range(4):
            await llm.chat(MSGS)
    # 600 a minute: one call each 0.1 s across the tenant (zero burst).
    assert time.monotonic() - started >= 0.28
    assert lim.usage("tenant:acme")["rpm_used"] == 4
    assert scope.tenant_tickets == {}


async def test_every_attempt_is_held_against_the_dollar_caps_and_settled(setup) -> None:
    """A retry after a provider 429 is a call of its own: held before, settled after; a cap
    that refuses the hold raises ``CostCapReached`` and the call is not made."""
    from reactq.shared.errors import CostCapReached

    lim, spent, flow = setup
    log: list[tuple[str, str | None, float]] = []

    def on_reserve(scope: FlowScope, amount: float) -> None:
        log.append(("hold", scope.member, amount))
        if len([x for x in log if x[0] == "hold"]) > 2:
            raise CostCapReached("tenant", 1.0, 1.0)

    flow.on_reserve = on_reserve
    flow.on_cost = lambda scope, cost: log.append(("settle", scope.member, cost))
    fake = Fake(fail=[_429(0.05)])
    llm = LimitedLLM(fake, Limits(), flow)
    with flow_scope(FlowScope(run_id="r1", cost_per_day_usd=1.0)):
        await llm.chat(MSGS)
        with pytest.raises(CostCapReached):
            await llm.chat(MSGS)
    assert fake.calls == 2  # the refused call was never sent
    assert [(kind, member) for kind, member, _ in log] == [
        ("hold", "r1"), ("settle", "r1"), ("hold", "r1"), ("settle", "r1"), ("hold", "r1")]
    with flow_scope(FlowScope(spender="dag:d1", cost_per_day_usd=1.0)), pytest.raises(CostCapReached):
        await llm.chat(MSGS)  # a DAG's own calls: held as the DAG
    assert log[-1][:2] == ("hold", "dag:d1")
    log.clear()
    with flow_scope(FlowScope(run_id="r2")):  # no cap: nothing held
        await llm.chat(MSGS)
    assert [kind for kind, _, _ in log] == ["settle"]



async def test_the_first_call_of_a_step_uses_the_hold_its_gate_made(setup) -> None:
    """The step boundary checked the caps and held the step's call (``held_at_gate``): that
    call holds nothing more, the step's next call holds again."""
    lim, spent, flow = setup
    holds: list[str | None] = []
    flow.on_reserve = lambda scope, amount: holds.append(scope.member)
    flow.on_cost = lambda scope, cost: None
    llm = LimitedLLM(Fake(), Limits(), flow)
    with flow_scope(FlowScope(run_id="r1", cost_per_day_usd=1.0, held_at_gate=True)):
        await llm.chat(MSGS)
        assert holds == []
        await llm.chat(MSGS)
    assert holds == ["r1"]
