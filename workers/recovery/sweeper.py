"""The stall sweeper: a run that nobody holds and nothing moves is sent on again.

Leases cover a step whose worker died while running it. They cannot cover a message that
was lost between a task and the next: delivered to a worker just before the broker or Redis
went away, the message sits in kombu's ``unacked`` hash until the visibility timeout (an
hour) and the run waits that long with no lease for the watchdog to find. Every ``PASS``
seconds each worker looks at the newest runs: one still ``queued`` / ``running`` whose state
has not changed for ``REACTQ_STALL_SECONDS`` and whose run lease is not held gets a
resume-current ``iterate`` — at most once per stall window for the whole fleet (``SET NX``).
A duplicate is harmless: a stale ``step_no`` is a no-op and a held lease makes it back off.
A run unchanged since before the runs queue was last seen empty is not stalled but queued
behind a backlog (``workers/recovery/backlog.py``): it is left to its message.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from reactq.shared.stores.runs import RunStore
from reactq.shared.wire import ITERATE, RUNS_QUEUE
from reactq.workers.recovery.backlog import Backlog

log = logging.getLogger(__name__)

PASS = 10.0
NEWEST = 2000
Send = Callable[[str, list[Any], str], None]


def stalled(runs: RunStore, stall: float, now: float | None = None,
            backlog: Backlog | None = None) -> list[str]:
    """Ids of recent runs that are unfinished, unchanged for ``stall`` s and not held (and,
    given a ``backlog``, unchanged since before the runs queue was last seen empty)."""
    now = time.time() if now is None else now
    out = []
    for run in runs.activity(NEWEST):
        changed = now if run.updated_at is None else run.updated_at
        if run.status in ("queued", "running") and not run.held and now - changed > stall and (
                backlog is None or backlog.clear_since(RUNS_QUEUE, changed)):
            out.append(run.run_id)
    return out


class Sweeper(threading.Thread):
    """One per worker process, next to the lease watchdog."""

    def __init__(self, runs: RunStore, send: Send, stall: float, backlog: Backlog | None = None) -> None:
        super().__init__(daemon=True, name="reactq-sweeper")
        self.runs, self.send, self.stall, self.backlog = runs, send, stall, backlog
        self.stopped = threading.Event()

    def sweep(self) -> list[str]:
        resent = []
        for run_id in stalled(self.runs, self.stall, backlog=self.backlog):
            # One resend per stall window for the whole fleet.
            if self.runs.claim_resume(run_id, max(1, int(self.stall))):
                log.warning("resuming run %s: unchanged for %.0fs and nobody holds it", run_id, self.stall)
                self.send(ITERATE, [run_id, None], RUNS_QUEUE)
                resent.append(run_id)
        return resent

    def run(self) -> None:
        while not self.stopped.wait(PASS):
            try:
                self.sweep()
            except Exception:  # Redis or the broker away: the next pass tries again
                log.warning("stall sweep failed", exc_info=True)
