"""Dollars spent under a cap, with the reservations of calls in flight.

A spend ledger is a hash: ``spent`` (settled dollars), ``held`` (the sum of the
reservations), ``r:<member>`` (one member's reservation: a run's next call). A cap stops new
calls once ``spent + held`` reaches it; a call's own worst case need not fit, so the call
that reaches the cap is the last. ``reserve`` replaces the member's earlier reservation (a
step redelivered after a crash does not hold twice), ``settle`` turns it into what the call
really cost. Both are one script on the ledger's slot (``SpendLedger``).

Two ledgers use it: a tenant's UTC day, ``tenant:{t}:spend:{day}`` (``TenantSpend``), and a
batch with ``cost_budget_usd``, ``batch:{id}:spend`` (``BatchSpend``), which every call of
the batch's runs is held against.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis

from reactq.shared.keys import Keys
from reactq.shared.stores.roundtrip import Op

__all__ = ["DAY_TTL", "BatchSpend", "Reservation", "SpendLedger", "TenantSpend", "today"]

#: The spend of a day is kept this long (yesterday's stays readable).
DAY_TTL = 2 * 86400

_RESERVE = """
local spent = tonumber(redis.call('HGET', KEYS[1], 'spent') or '0')
local held = tonumber(redis.call('HGET', KEYS[1], 'held') or '0')
local field = 'r:' .. ARGV[1]
local prev = tonumber(redis.call('HGET', KEYS[1], field) or '0')
held = held - prev
local cap = tonumber(ARGV[3])
if cap >= 0 and spent + held >= cap then
  if prev ~= 0 then
    redis.call('HDEL', KEYS[1], field)
    redis.call('HSET', KEYS[1], 'held', tostring(held))
  end
  return {0, tostring(spent), tostring(held)}
end
redis.call('HSET', KEYS[1], field, ARGV[2], 'held', tostring(held + tonumber(ARGV[2])))
redis.call('EXPIRE', KEYS[1], ARGV[4])
return {1, tostring(spent), tostring(held)}
"""

_SETTLE = """
local field = 'r:' .. ARGV[1]
local prev = tonumber(redis.call('HGET', KEYS[1], field) or '0')
if prev ~= 0 then
  redis.call('HDEL', KEYS[1], field)
  local held = tonumber(redis.call('HGET', KEYS[1], 'held') or '0') - prev
  if held < 0 then held = 0 end
  redis.call('HSET', KEYS[1], 'held', tostring(held))
end
if tonumber(ARGV[2]) ~= 0 then redis.call('HINCRBYFLOAT', KEYS[1], 'spent', ARGV[2]) end
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""


def today(now: float | None = None) -> str:
    return time.strftime("%Y%m%d", time.gmtime(time.time() if now is None else now))


@dataclass(frozen=True)
class Reservation:
    ok: bool
    spent: float
    held: float


class SpendLedger:
    """Reserve and settle on any spend hash (see the module doc)."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client
        self._reserve = client.register_script(_RESERVE)
        self._settle = client.register_script(_SETTLE)

    def reserve(self, key: str, member: str, amount: float, cap: float | None, ttl: int) -> Reservation:
        """Hold ``amount`` for ``member``'s next call unless spent + held reached ``cap``."""
        out: list[Any] = self._reserve(keys=[key], args=[member, repr(amount), repr(-1.0 if cap is None else cap), ttl])
        return Reservation(bool(int(out[0])), float(out[1]), float(out[2]))

    def settle_op(self, key: str, member: str, cost: float, ttl: int) -> Op:
        """The settle of ``member``'s call (its reservation released, ``cost`` spent), as an
        op for the step's next round trip."""
        return Op.call(self._settle, [key], [member, repr(cost), ttl])

    def spent(self, key: str) -> float:
        return float(self.r.hget(key, "spent") or 0.0)


class TenantSpend:
    """A tenant's dollars per UTC day (``cost_per_day_usd``)."""

    def __init__(self, client: redis.Redis, keys: Keys | None = None) -> None:
        self.r = client
        self.keys = keys or Keys()
        self.ledger = SpendLedger(client)

    def key(self, tenant: str, day: str | None = None) -> str:
        return self.keys.tenant_spend(tenant, day or today())

    def reserve(self, tenant: str, member: str, amount: float, cap: float | None) -> Reservation:
        return self.ledger.reserve(self.key(tenant), member, amount, cap, DAY_TTL)

    def settle_op(self, tenant: str, member: str, cost: float) -> Op:
        return self.ledger.settle_op(self.key(tenant), member, cost, DAY_TTL)

    def spent(self, tenant: str, day: str | None = None) -> float:
        return self.ledger.spent(self.key(tenant, day))


class BatchSpend:
    """A batch's dollars (its ``cost_budget_usd``): kept ``ttl`` seconds after its last call."""

    def __init__(self, client: redis.Redis, keys: Keys | None = None, ttl: int = 86400) -> None:
        self.keys = keys or Keys()
        self.ttl = ttl
        self.ledger = SpendLedger(client)

    def reserve(self, batch_id: str, member: str, amount: float, cap: float) -> Reservation:
        return self.ledger.reserve(self.keys.batch_spend(batch_id), member, amount, cap, self.ttl)

    def settle_op(self, batch_id: str, member: str, cost: float) -> Op:
        return self.ledger.settle_op(self.keys.batch_spend(batch_id), member, cost, self.ttl)

    def totals(self, batch_id: str) -> tuple[float, float]:
        """(spent, held): the batch's settled dollars and what its calls in flight hold."""
        spent, held = self.ledger.r.hmget(self.keys.batch_spend(batch_id), "spent", "held")
        return float(spent or 0.0), float(held or 0.0)

    def release(self, batch_id: str, member: str) -> None:
        """Give back ``member``'s reservation (a call another cap refused)."""
        self.settle_op(batch_id, member, 0.0).run(self.ledger.r)

    def spent(self, batch_id: str) -> float:
        return self.ledger.spent(self.keys.batch_spend(batch_id))
