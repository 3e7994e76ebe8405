"""The watchdog: resend committed work that nobody took up, and stop resending a poison pill.

Every worker process runs one ``DueWatchdog`` thread. Twice a second it claims, in one Lua
script, the members of the ``due`` set (``reactq.shared.stores.due``) whose deadline has passed:

* a member whose lease is alive is running: its deadline moves to just after that lease
  could lapse (a holder that dies is noticed within about one lease TTL);
* any other member is claimed: its deadline moves one bound ahead (so exactly one
  watchdog resends it per bound) and its message is sent again. That covers a message
  parked in a dead worker's hands (kombu's ``unacked``) before its task took the lease, a
  message lost on the way, a holder that died mid-step, and a delivery that backed off
  because a dead holder's lease was still alive: none of these depends on the broker's
  visibility timeout. A duplicate is harmless: it is stale (``step_no``), the tool ledger
  knows the call, or the lease makes it back off.

What "sent again" means for each kind of work, and how it is ended when it keeps killing
its workers, is the business of that kind's driver: the watchdog is handed one ``Handler``
per kind (runs and tool calls: ``workers/runs/recover.py``; DAGs: ``workers/dags/recover.py``).

A backlog. A member whose queue has not been seen empty since it was sent (or last
deferred) is most likely still waiting in that queue: it is deferred one bound, not resent
(``workers/recovery/backlog.py``), so thousands of queued runs do not breed thousands of duplicates.

Crashes. The holder's record in ``lease:tasks`` outlives a holder that died; whoever
notices first consumes it (the claim script deletes it, a task taking the lease over
overwrites it) and counts one crash for the member's current step in the owner's hash
(``due_n`` / ``due_n:{call}``). At ``REACTQ_MAX_TASK_CRASHES`` the work is not sent again:
a tool call is answered with an error observation (``error`` event ``kind:
"tool_crashed"``), a run step ends the run ``failed`` (``kind: "task_crashed"``) with
``done``, a DAG ends ``failed``. Other runs never notice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import redis

from reactq.shared.stores.crashes import FIELD as CRASH_FIELD, count_crash
from reactq.shared.stores.due import Member, now_ms, parse_member
from reactq.shared.wire import RUNS_QUEUE, TOOLS_QUEUE
from reactq.workers.recovery.backlog import Backlog
from reactq.workers.runtime import Runtime

log = logging.getLogger(__name__)

Send = Callable[[str, list[Any], str], None]

Handler = Callable[["DueWatchdog", str, Member, bool], None]
"""How one kind of work (a due member's ``kind``: run, tool, dag) is taken up again:
``handler(watchdog, member, parsed member, died)``. The handlers are handed to the watchdog
where the worker is wired (``workers/runs/tasks.py``), so this module imports no driver."""

# KEYS: due set. ARGV: now ms, bound ms, limit. Claims the members past their deadline
# (each moves one bound ahead, so one watchdog takes each) and returns (member, deadline)
# pairs. Lease keys live in other slots (sharded, keys.py), so the caller checks them next.
_CLAIM = """
local out = {}
local now = tonumber(ARGV[1])
local items = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
for i = 1, #items, 2 do
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), items[i])
  table.insert(out, items[i])
  table.insert(out, items[i + 1])
end
return out
"""

#: After a member's lease is seen alive, look again this long after it could lapse.
RECHECK_MS = 100


class Crashes:
    """Resend and crash counts per due member and step, kept in the owner's hash."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.limit = rt.settings.max_task_crashes

    def count(self, hash_key: str, field: str, step: int, died: bool) -> int:
        """Count one resend (and a crash if ``died``) of ``step``; returns the crashes so far."""
        return count_crash(self.rt.redis, hash_key, field, step, died)

    def run(self, run_id: str, step_no: int, died: bool) -> int:
        return self.rt.store.count_crash(run_id, step_no, died)

    def tool(self, run_id: str, call_id: str, step_no: int, died: bool) -> int:
        return self.rt.store.count_crash(run_id, step_no, died, call_id=call_id)

    def dag(self, dag_id: str, version: int, died: bool) -> int:
        return self.count(self.rt.keys.dag(dag_id), CRASH_FIELD, version, died)


class DueWatchdog(threading.Thread):
    """Resends what is due and not taken up; one per worker process."""

    def __init__(self, rt: Runtime, send: Send, handlers: Mapping[str, Handler], interval: float = 0.5,
                 limit: int = 200, backlog: Backlog | None = None) -> None:
        super().__init__(daemon=True, name="reactq-due-watchdog")
        self.rt = rt
        self.send = send
        self.handlers = dict(handlers)
        self.backlog = backlog
        self.interval = interval
        self.limit = limit
        self.crashes = Crashes(rt)
        self.stopped = threading.Event()
        self._claim = rt.redis.register_script(_CLAIM)

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                self.tick()
            except Exception:  # keep watching whatever happens (a Redis outage, a bug)
                log.exception("due watchdog pass failed")

    def claim(self) -> list[tuple[str, bool, float]]:
        """``(member, died, deadline)`` of the members claimed now (deadline in epoch s).

        A claimed member whose lease is alive is running: its deadline moves to just after
        that lease could lapse, and it is not returned. For the others, the holder's record
        left in its lease shard's ``tasks`` hash (consumed here, once) says its holder died."""
        s, keys, r = self.rt.settings, self.rt.keys, self.rt.redis
        now = now_ms()
        raw = self._claim(keys=[keys.due], args=[now, int(s.due_seconds * 1000), self.limit])
        pairs = [(_s(raw[i]), float(raw[i + 1])) for i in range(0, len(raw), 2)]
        if not pairs:
            return []
        pipe = r.pipeline(transaction=False)
        for member, _ in pairs:
            pipe.pttl(keys.lease(member))
        ttls = pipe.execute()
        pipe = r.pipeline(transaction=False)
        free = []  # (member, deadline) whose lease is not held
        for (member, deadline), pttl in zip(pairs, ttls, strict=True):
            if pttl > 0 or pttl == -1:
                pipe.zadd(keys.due, {member: now + max(pttl, 0) + RECHECK_MS}, xx=True)
            else:
                free.append((member, deadline))
        for member, _ in free:
            pipe.hdel(keys.lease_tasks_for(member), member)
        results = pipe.execute()
        died = results[len(results) - len(free):] if free else []
        return [(member, bool(d), deadline / 1000)
                for (member, deadline), d in zip(free, died, strict=True)]

    def tick(self) -> int:
        """One pass; returns how many members it claimed."""
        if self.backlog is not None:
            self.backlog.poll((RUNS_QUEUE, TOOLS_QUEUE))  # before the claim: see backlog.py
        claimed = self.claim()
        bound = self.rt.settings.due_seconds
        for member, died, deadline in claimed:
            if not died and not self._delivered(member, deadline - bound):
                log.debug("due: %s deferred, its queue has not drained since it was sent", member)
                continue  # the claim moved its deadline one bound ahead
            try:
                log.warning("due: %s%s, %.2f s past its deadline", member,
                            " (its holder died)" if died else "", time.time() - deadline)
                self.handle(member, died)
            except redis.RedisError:
                raise
            except Exception:  # one bad record must not stop the others
                log.exception("due watchdog: %s", member)
        return len(claimed)

    def _delivered(self, member: str, sent_at: float) -> bool:
        """Whether ``member``'s message, sent at ``sent_at``, has left its queue by now."""
        m = parse_member(member)
        if self.backlog is None or (m is not None and m.kind in ("approval", "webhook")):
            return True  # an approval's expiry, a webhook's retry: no message waiting in a queue
        queue = TOOLS_QUEUE if m is not None and m.kind == "tool" else RUNS_QUEUE
        return self.backlog.clear_since(queue, sent_at)

    def handle(self, member: str, died: bool) -> None:
        m = parse_member(member)
        handler = self.handlers.get(m.kind) if m is not None else None
        if m is None or handler is None:
            self.forget(member)
        else:
            handler(self, member, m, died)

    def forget(self, member: str) -> None:
        """Drop ``member`` from the due set: its work is over (or was never ours to resend)."""
        self.rt.redis.zrem(self.rt.keys.due, member)


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
