"""``BatchDriver``: submits a batch's lines with at most N runs in flight and reports each
run's result as it ends.

Every run is submitted with an idempotency key derived from where the batch comes from (the
input file's absolute path, or the HTTP batch id), the line's id and the request itself (an
edited line is a new run), so a restarted batch re-attaches a line whose run was submitted
but whose result was never written to that run (same key → same run id): no run is paid for
twice. A line's own ``idempotency_key``, when it has one, wins.

The driver polls the runs it has in flight (one pipelined ``HMGET`` per tick) rather than
reading their event streams: a batch needs only each run's final result, and a poll every
100 ms costs one round trip however many runs are in flight.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from reactq.dispatcher.batch.flow import BatchFlow
from reactq.dispatcher.batch.items import BatchItem, Tally, format_validation, idem_key, invalid_result, run_result
from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.errors import RequestError, TooManyRequests
from reactq.shared.requests import RunRequest
from reactq.shared.tenants.tenancy import DEFAULT_TENANT
from reactq.shared.service import Origin

log = logging.getLogger(__name__)

POLL_SECONDS = 0.1


@dataclass
class BatchDriver:
    """Submits items with at most ``concurrency`` in flight and reports each result.

    ``stop`` (set by Ctrl-C handling or gateway shutdown) stops submitting; runs already in
    flight are left running, to be re-attached by the next attempt.
    """

    dispatcher: Any
    source: str
    concurrency: int
    on_result: Callable[[dict[str, Any]], None]
    on_tick: Callable[[Tally], None] | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    tally: Tally = field(default_factory=Tally)
    poll: float = POLL_SECONDS
    batch_id: str | None = None  # an HTTP batch: its runs are indexed under it
    token_budget: int | None = None
    """The batch's cap on its runs' spend; reached ⇒ lines not started end ``skipped``."""
    cancelled: Callable[[], bool] | None = None
    """Polled each tick: True ⇒ cancel the runs in flight and skip the lines not started."""
    flow: BatchFlow = field(default_factory=lambda: BatchFlow())
    tenant: str = DEFAULT_TENANT
    """Whose runs these are (an HTTP batch: the tenant of the key that sent it)."""
    cost_budget_usd: float | None = None
    """The batch's cap in dollars on its runs' spend; reached ⇒ lines not started end
    ``skipped``. An HTTP batch's runs also hold each of their calls against it (they learn it
    at creation), so runs in flight stop at the call that reaches it."""

    def run(self, items: Iterable[BatchItem]) -> Tally:
        queue = deque(items)
        inflight: dict[str, BatchItem] = {}
        self.flow.spent_done = self.tally.tokens
        self.flow.cost_done = self.tally.cost_usd
        while (queue or inflight) and not self.stop.is_set():
            self.flow.check(self, queue, inflight)
            if not self.flow.held_back(self, inflight):
                self._fill(queue, inflight)
            self.tally.running = len(inflight)
            finished = self._poll(inflight)
            for run_id, result, status in finished:
                item = inflight.pop(run_id)
                self.tally.running = len(inflight)  # a result and the count it leaves are one write
                self.report(run_result(item, run_id, result, status))
            self.tally.running = len(inflight)
            if self.on_tick is not None:
                self.on_tick(self.tally)
            if not finished and (inflight or queue):
                self.stop.wait(self.poll)
        return self.tally

    def report(self, res: dict[str, Any]) -> None:
        """Count a line's result in the tally and hand it on."""
        self.tally.add(res)
        self.on_result(res)

    def _fill(self, queue: deque[BatchItem], inflight: dict[str, BatchItem]) -> None:
        while queue and len(inflight) < self.concurrency and not self.stop.is_set():
            item = queue.popleft()
            if item.request is None:
                self.report(invalid_result(item))
                continue
            req = item.request
            if req.idempotency_key is None:
                req = req.model_copy(update={"idempotency_key": idem_key(self.source, item.id, req)})
            extra = {"replay": item.replay} if item.replay else {}
            try:
                handle = (self.dispatcher.submit(req, batch_id=self.batch_id, tenant=self.tenant,
                                                 batch_cost_budget_usd=self.cost_budget_usd, **extra)
                          if self.batch_id else self.dispatcher.submit(req, tenant=self.tenant, **extra))
            except ValidationError as exc:
                item.error = f"line {item.line}: {format_validation(exc)}"
                self.report(invalid_result(item))
                continue
            except TooManyRequests:
                queue.appendleft(item)  # the tenant is at its max_active_runs: wait a tick
                return
            except RequestError as exc:
                item.error = f"line {item.line}: {exc}"
                self.report(invalid_result(item))
                continue
            if handle.run_id in inflight:  # two lines with one explicit idempotency_key
                other = inflight[handle.run_id].line
                item.error = f"line {item.line}: idempotency_key: the same run as line {other}"
                self.report(invalid_result(item))
                continue
            if not handle.created:
                self._repair(handle.run_id, req, item.replay)
            inflight[handle.run_id] = item

    def _repair(self, run_id: str, req: RunRequest, replay: dict[str, Any] | None = None) -> None:
        """Re-attaching to a run an earlier attempt submitted: make sure it will finish.

        That attempt may have been killed half-way through ``submit``: after taking the
        idempotency key but before storing the run (no run hash: store it now), or after
        storing it but before enqueueing its first step (still ``queued``: enqueue it
        again). Enqueueing twice is harmless: a step already taken is a no-op for the
        workers and a step in progress holds a lease.
        """
        d = self.dispatcher
        [[raw]] = d.store.fields_of([run_id], "status")
        if raw is None:
            log.warning("run %s was never stored (an earlier attempt died in submit); storing it", run_id)
            origin = Origin("batch", batch_id=self.batch_id, batch_cost_budget_usd=self.cost_budget_usd,
                            replay=replay)
            d.door.create_run(req, tenant=self.tenant, origin=origin, run_id=run_id)
        elif raw == "queued":
            d.door.start_run(run_id, req.priority)

    def _poll(self, inflight: dict[str, BatchItem]) -> list[tuple[str, dict[str, Any] | None, str]]:
        """Runs that ended since the last tick: ``(run_id, result, status)``."""
        if not inflight:
            return []
        d = self.dispatcher
        ids = list(inflight)
        out: list[tuple[str, dict[str, Any] | None, str]] = []
        for rid, (st, result) in zip(ids, d.store.fields_of(ids, "status", "result"), strict=True):
            if st is None:  # expired (or deleted) before we saw it end
                out.append((rid, None, "failed"))
                continue
            if st in TERMINAL_STATUSES and result is not None:
                out.append((rid, json.loads(result), st))
        if self.token_budget is not None or self.cost_budget_usd is not None:
            self.flow.read_spend(d, ids, {rid for rid, _, _ in out})
        return out
