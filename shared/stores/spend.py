"""Dollars spent by a tenant per UTC day, with the reservations of calls in flight.

``tenant:{t}:spend:{day}`` (hash): ``spent`` (settled dollars), ``held`` (the sum of the
reservations), ``r:<member>`` (one member's reservation: a run's next call). A cap stops new
calls once ``spent + held`` reaches it; a call's own worst case need not fit, so the call
that reaches the cap is the last. ``reserve`` replaces the member's earlier reservation (a
step redelivered after a crash does not hold twice), ``settle`` turns it into what the call
really cost. Both are one script on the tenant's slot.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis

from reactq.shared.keys import Keys
from reactq.shared.stores.roundtrip import Op

__all__ = ["DAY_TTL", "Reservation", "TenantSpend", "today"]

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


class TenantSpend:
    def __init__(self, client: redis.Redis, keys: Keys | None = None) -> None:
        self.r = client
        self.keys = keys or Keys()
        self._reserve = client.register_script(_RESERVE)
        self._settle = client.register_script(_SETTLE)

    def key(self, tenant: str, day: str | None = None) -> str:
        return self.keys.tenant_spend(tenant, day or today())

    def reserve(self, tenant: str, member: str, amount: float, cap: float | None) -> Reservation:
        """Hold ``amount`` for ``member``'s next call unless spent + held reached ``cap``."""
        out: list[Any] = self._reserve(keys=[self.key(tenant)],
                                       args=[member, repr(amount), repr(-1.0 if cap is None else cap), DAY_TTL])
        return Reservation(bool(int(out[0])), float(out[1]), float(out[2]))

    def settle_op(self, tenant: str, member: str, cost: float) -> Op:
        """The settle of ``member``'s call (its reservation released, ``cost`` spent), as an
        op for the step's next round trip."""
        return Op.call(self._settle, [self.key(tenant)], [member, repr(cost), DAY_TTL])

    def spent(self, tenant: str, day: str | None = None) -> float:
        return float(self.r.hget(self.key(tenant, day), "spent") or 0.0)
