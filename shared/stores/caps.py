"""A call's dollar caps as one value, held and settled at one point.

``DollarCaps`` is every dollar cap over one call (like pydantic-ai's ``UsageLimits``): the
run's ``cost_budget_usd``, its batch's ``cost_budget_usd`` and its tenant's
``cost_per_day_usd``. ``CapLedger.hold`` checks them all before the call, in that order, and
holds the call's worst case against the batch's spend and the tenant's day (a cap reached
raises ``CostCapReached`` naming whose it is, and nothing stays held); ``CapLedger.settle``
turns the holds into what the call really cost, and adds it to the run's recorded dollars.
The flow-control middleware calls these two around every priced call
(``reactq.shared.flow.middleware``).
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from reactq.shared.errors import CostCapReached
from reactq.shared.keys import Keys
from reactq.shared.stores.roundtrip import checked, defer, execute, failed, take
from reactq.shared.stores.run_hash import cost_op, spending_op
from reactq.shared.stores.spend import BatchSpend, TenantSpend

__all__ = ["CapLedger", "DollarCaps"]


@dataclass(frozen=True)
class DollarCaps:
    """Every dollar cap over a call; None: none of that kind."""

    run_usd: float | None = None
    """The run's own ``cost_budget_usd`` (against its recorded dollars)."""
    batch: tuple[str, float] | None = None
    """The batch's id and its ``cost_budget_usd`` (against the batch's spend)."""
    tenant_day_usd: float | None = None
    """The tenant's ``cost_per_day_usd`` (against its UTC day's spend)."""

    @property
    def any(self) -> bool:
        return self.run_usd is not None or self.batch is not None or self.tenant_day_usd is not None


class CapLedger:
    """Holds and settles calls under their ``DollarCaps`` (one per worker process)."""

    def __init__(self, client: redis.Redis, keys: Keys, batch_ttl_seconds: int) -> None:
        self.r = client
        self.keys = keys
        self.tenants = TenantSpend(client, keys)
        self.batches = BatchSpend(client, keys, batch_ttl_seconds)

    def hold(self, caps: DollarCaps, *, tenant: str, member: str, run_id: str | None, amount: float) -> None:
        """Before a call: each cap still open, and ``amount`` (the call's worst case) held
        against the batch's spend and the tenant's day. ``CostCapReached`` otherwise."""
        read = [spending_op(self.keys, run_id)] if run_id is not None and caps.run_usd is not None else []
        # The settles this step still defers go first: the check sees every call before it.
        replies = execute(self.r, [*take(), *read])
        failed(replies[:len(replies) - len(read)])
        if read and caps.run_usd is not None:
            cost = float(checked(replies[-1])[1] or 0.0)
            if cost >= caps.run_usd:
                raise CostCapReached("run", cost, caps.run_usd)
        if caps.batch is not None:
            got = self.batches.reserve(caps.batch[0], member, amount, caps.batch[1])
            if not got.ok:
                raise CostCapReached("batch", got.spent + got.held, caps.batch[1])
        if caps.tenant_day_usd is not None:
            got = self.tenants.reserve(tenant, member, amount, caps.tenant_day_usd)
            if not got.ok:
                if caps.batch is not None:
                    self.batches.release(caps.batch[0], member)  # the call is not made
                raise CostCapReached("tenant", got.spent + got.held, caps.tenant_day_usd)

    def settle(self, caps: DollarCaps, *, tenant: str, member: str, run_id: str | None, cost: float) -> None:
        """After a call: what it cost in the run's dollars, its batch's and its tenant's day
        (the holds released), deferred to the step's next round trip."""
        # A call that cost nothing and held nothing in the tenant's day has nothing to settle
        # there (only a tenant with a daily cap holds: ``hold``).
        ops = [self.tenants.settle_op(tenant, member, cost)] if cost or caps.tenant_day_usd is not None else []
        if caps.batch is not None:
            ops.append(self.batches.settle_op(caps.batch[0], member, cost))
        if cost and run_id:
            ops.append(cost_op(self.keys, run_id, cost))
        if ops:
            defer(self.r, ops)
