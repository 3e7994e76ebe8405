"""The spend ledger's reserve and settle scripts on a real Redis: a batch's ``cost_budget_usd``
(``batch:{id}:spend``) holds every call of its runs the way a tenant's day does."""

from __future__ import annotations

import uuid

import pytest
import redis

from reactq.shared.keys import Keys
from reactq.shared.stores.spend import BatchSpend

pytestmark = pytest.mark.integration


def test_a_batch_ledger_refuses_once_spent_plus_held_reaches_its_cap(r: redis.Redis) -> None:
    spend, batch = BatchSpend(r, Keys(), ttl=600), uuid.uuid4().hex
    assert spend.reserve(batch, "run-a", 0.004, cap=0.01).ok
    assert spend.reserve(batch, "run-b", 0.004, cap=0.01).ok
    # 0.008 held: a third call may still start (its own worst case need not fit) ...
    assert spend.reserve(batch, "run-c", 0.004, cap=0.01).ok
    # ... and then none: 0.012 held reaches the cap.
    refused = spend.reserve(batch, "run-d", 0.001, cap=0.01)
    assert not refused.ok and refused.held == pytest.approx(0.012)
    key = Keys().batch_spend(batch)
    assert r.hget(key, "r:run-d") is None  # a refused call holds nothing
    assert 0 < r.ttl(key) <= 600


def test_settle_turns_a_reservation_into_the_calls_cost(r: redis.Redis) -> None:
    spend, batch = BatchSpend(r, Keys(), ttl=600), uuid.uuid4().hex
    key = Keys().batch_spend(batch)
    assert spend.reserve(batch, "run-a", 0.004, cap=0.01).ok
    assert spend.reserve(batch, "run-a", 0.005, cap=0.01).ok  # a redelivered step: replaced, not added
    assert float(r.hget(key, "held") or 0) == pytest.approx(0.005)
    spend.settle_op(batch, "run-a", 0.003).run(r)
    assert spend.spent(batch) == pytest.approx(0.003)
    assert float(r.hget(key, "held") or 0) == 0.0 and r.hget(key, "r:run-a") is None
    # Settled spend counts like held spend: 0.003 + 0.007 reaches 0.01.
    spend.settle_op(batch, "run-b", 0.007).run(r)
    assert not spend.reserve(batch, "run-a", 0.0001, cap=0.01).ok
    # A member refused elsewhere gives its reservation back.
    other = uuid.uuid4().hex
    assert spend.reserve(other, "run-x", 0.002, cap=0.01).ok
    spend.release(other, "run-x")
    assert float(r.hget(Keys().batch_spend(other), "held") or 0) == 0.0 and spend.spent(other) == 0.0
