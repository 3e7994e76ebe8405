"""Flow control for batches: a batch's token and dollar budgets and its cancellation.

``BatchDriver`` (``driver.py``) calls ``BatchFlow.check`` every tick. The batch's
spend is what its runs paid — the ``tokens_spent`` each run's LLM middleware adds up in
the run hash (every call, retries included), read for the runs in flight with the poll
the driver makes anyway. Once the spend reaches ``token_budget``, or the batch is
cancelled (``POST /v1/batches/{id}/cancel``, ``reactq batch-cancel``), every line not yet
started ends ``skipped`` with an error naming why; on cancel the runs in flight are
cancelled too (on budget they finish). The tally's ``stopped`` says why for the summary.

An HTTP batch's ``cost_budget_usd`` is also held by every call of its runs in flight (the
workers' ``batch:{id}:spend``, ``reactq.shared.stores.spend``): they stop at the call that
reaches it. While its calls in flight hold the rest of it, no line starts (``held_back``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any, Protocol

from reactq.dispatcher.batch.items import BatchItem, Tally, invalid_result, skipped_result
from reactq.shared.stores.run_hash import COST_FIELD, SPENT_FIELD
from reactq.shared.stores.spend import BatchSpend



class DrivenBatch(Protocol):
    """What ``BatchFlow.check`` reads of the batch it stops, and where it reports the lines
    it skips (``BatchDriver`` fits)."""

    dispatcher: Any
    tally: Tally
    batch_id: str | None
    token_budget: int | None
    cost_budget_usd: float | None
    cancelled: Callable[[], bool] | None

    def report(self, res: dict[str, Any]) -> None: ...


@dataclass
class BatchFlow:
    spent_done: int = 0
    """Spend of the batch's runs that ended (plus what an earlier attempt reported)."""
    spent_live: dict[str, int] = field(default_factory=dict)
    cost_done: float = 0.0
    """Dollars of the batch's runs that ended (plus what an earlier attempt reported)."""
    cost_live: dict[str, float] = field(default_factory=dict)
    cancel_sent: bool = False

    @property
    def spent(self) -> int:
        return self.spent_done + sum(self.spent_live.values())

    @property
    def cost(self) -> float:
        return round(self.cost_done + sum(self.cost_live.values()), 11)

    def read_spend(self, d: Any, ids: list[str], finished: set[str]) -> None:
        """Refresh the spend of ``ids`` (in flight at this tick; ``finished`` just ended)."""
        rows = d.store.fields_of(ids, SPENT_FIELD, COST_FIELD)
        for rid, (raw, raw_cost) in zip(ids, rows, strict=True):
            n, cost = int(raw or 0), float(raw_cost or 0.0)
            if rid in finished:
                self.spent_done += n
                self.cost_done += cost
                self.spent_live.pop(rid, None)
                self.cost_live.pop(rid, None)
            else:
                self.spent_live[rid] = n
                self.cost_live[rid] = cost

    def held_back(self, driver: DrivenBatch, inflight: dict[str, BatchItem]) -> bool:
        """Whether to start no line this tick: the calls in flight of the batch's runs hold
        the rest of its dollar cap (``batch:{id}:spend``), so a run started now would be
        refused at its first call. Never with no run in flight (the batch always moves)."""
        if driver.cost_budget_usd is None or driver.batch_id is None or not inflight:
            return False
        d = driver.dispatcher
        spent, held = BatchSpend(d.redis, d.keys).totals(driver.batch_id)
        return spent + held >= driver.cost_budget_usd

    def check(self, driver: DrivenBatch, queue: deque[BatchItem], inflight: dict[str, BatchItem]) -> None:
        """Skip the lines not started (and cancel runs in flight) once the batch must stop."""
        reason: str | None = None
        if driver.cancelled is not None and driver.cancelled():
            reason = "cancelled"
            if not self.cancel_sent:
                self.cancel_sent = True
                for rid in list(inflight):
                    driver.dispatcher.handle(rid).cancel()
        elif driver.token_budget is not None and self.spent >= driver.token_budget:
            reason = f"token budget reached ({self.spent} of {driver.token_budget} tokens)"
        elif driver.cost_budget_usd is not None and self.cost >= driver.cost_budget_usd:
            reason = f"cost budget reached (${self.cost:.4f} of ${driver.cost_budget_usd:.4f})"
        if reason is None or (not queue and reason != "cancelled"):
            return
        driver.tally.stopped = driver.tally.stopped or reason
        skipped = 0
        while queue:
            item = queue.popleft()
            skipped += item.request is not None
            driver.report(invalid_result(item) if item.request is None else skipped_result(item, reason))
        if skipped and reason != "cancelled":
            _count_budget_stop(driver.dispatcher, skipped)


def _count_budget_stop(d: Any, lines: int) -> None:
    """``reactq_flow_budget_stops{scope="batch_line"}`` (the schema the workers write)."""
    from reactq.shared.observe.metrics_schema import label_field

    try:
        d.redis.hincrby(d.keys.metrics("flow_budget_stops"), label_field(["batch_line"]), lines)
    except Exception:  # a metric never stops a batch
        pass
