"""Threads in Redis: a conversation's history, its active run, its queue.

Every decision about a thread is one Lua script over the thread's own keys (they share the
``{thread_id}`` hash tag, so a Redis Cluster runs each script on one slot):

* ``submit`` decides what a new run does while another run of its thread is active —
  start, inject, reject, enqueue, or stop the active run (interrupt / rollback) and go
  first in the queue. Two clients racing on one thread get one active run.
* ``release`` is called when a run ends, for any reason: it appends the run's turns to
  the history (only if it was the active run, so a second call adds nothing), and makes
  the next queued run active. It answers which run is active afterwards, so a caller
  that died before sending that run's first task is repaired by the next call.

Thread keys have no TTL while a run is active or queued, and ``run_ttl`` once the thread
is idle, refreshed whenever it is used (like a run's keys).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import redis

from reactq.shared.events import dumps
from reactq.shared.stores.due import run_member
from reactq.shared.keys import Keys
from reactq.shared.models import ChatMessage
from reactq.shared.stores.runs import RunStore
from reactq.shared.stores.streams import text

# KEYS: thread hash, runs list, queue list, history list. ARGV: run id, strategy, runs
# entry (JSON), now. Returns {decision, active run id or ''}.
_SUBMIT = """
local active = redis.call('HGET', KEYS[1], 'active')
local strategy = ARGV[2]
if active and active ~= '' then
  if strategy == 'inject' and redis.call('HEXISTS', KEYS[1], 'stop:' .. active) == 1 then
    strategy = 'enqueue'  -- the active run is being stopped: it would never read the message
  end
  if strategy == 'inject' or strategy == 'reject' then
    for k = 1, 4 do redis.call('PERSIST', KEYS[k]) end
    return {strategy, active}
  end
  if strategy == 'enqueue' then
    redis.call('RPUSH', KEYS[3], ARGV[1])
  else
    redis.call('LPUSH', KEYS[3], ARGV[1])
    redis.call('HSET', KEYS[1], 'stop:' .. active, strategy)
  end
  redis.call('RPUSH', KEYS[2], ARGV[3])
  redis.call('HSET', KEYS[1], 'updated_at', ARGV[4])
  for k = 1, 4 do redis.call('PERSIST', KEYS[k]) end
  return {strategy == 'enqueue' and 'enqueued' or 'stopping', active}
end
redis.call('HSET', KEYS[1], 'active', ARGV[1], 'updated_at', ARGV[4])
redis.call('RPUSH', KEYS[2], ARGV[3])
for k = 1, 4 do redis.call('PERSIST', KEYS[k]) end
return {'start', ''}
"""

# KEYS: as for submit. ARGV: run id, history entry (JSON, '' = none), now, ttl, then
# (run id, runs entry) pairs of follow-up runs that go first in the queue, in order.
# Returns the active run after the call ('' = none).
_RELEASE = """
local active = redis.call('HGET', KEYS[1], 'active')
redis.call('HDEL', KEYS[1], 'stop:' .. ARGV[1])
if active ~= ARGV[1] then
  redis.call('LREM', KEYS[3], 0, ARGV[1])
  return active or ''
end
if ARGV[2] ~= '' then
  redis.call('RPUSH', KEYS[4], ARGV[2])
  redis.call('LTRIM', KEYS[4], -1000, -1)  -- runs read only the newest turns that fit
end
for i = #ARGV - 1, 5, -2 do redis.call('LPUSH', KEYS[3], ARGV[i]) end
for i = 5, #ARGV - 1, 2 do redis.call('RPUSH', KEYS[2], ARGV[i + 1]) end
local nxt = redis.call('LPOP', KEYS[3])
redis.call('HSET', KEYS[1], 'updated_at', ARGV[3])
if nxt then
  redis.call('HSET', KEYS[1], 'active', nxt)
  return nxt
end
redis.call('HDEL', KEYS[1], 'active')
for k = 1, 4 do redis.call('EXPIRE', KEYS[k], ARGV[4]) end
return ''
"""

# KEYS: as for submit. ARGV: ttl. Refreshes an idle thread's TTL; returns whether it exists.
_TOUCH = """
if redis.call('EXISTS', KEYS[1], KEYS[2]) == 0 then return 0 end
if not redis.call('HGET', KEYS[1], 'active') then
  for k = 1, 4 do redis.call('EXPIRE', KEYS[k], ARGV[1]) end
end
return 1
"""


@dataclass(frozen=True)
class Decision:
    """What ``submit`` decided: ``start`` | ``enqueued`` | ``stopping`` | ``inject`` | ``reject``,
    and the thread's active run (for every decision but ``start``)."""

    kind: str
    active_run: str | None


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class ThreadStore:
    """The thread scripts and reads. Cheap; one per process next to the ``RunStore``."""

    def __init__(self, client: redis.Redis, *, keys: Keys | None = None, ttl_seconds: int = 86400) -> None:
        self.r = client
        self.keys = keys or Keys()
        self.ttl = ttl_seconds
        self._submit = client.register_script(_SUBMIT)
        self._release = client.register_script(_RELEASE)
        self._touch = client.register_script(_TOUCH)

    def submit(self, thread_id: str, run_id: str, strategy: str, query: str, *,
               now: float | None = None) -> Decision:
        """Decide, atomically, what run ``run_id`` (not yet stored) does on its thread."""
        now = time.time() if now is None else now
        entry = dumps({"run_id": run_id, "query": query, "created_at": round(now, 6)})
        kind, active = self._submit(keys=self.keys.thread_keys(thread_id),
                                    args=[run_id, strategy, entry, f"{now:.6f}"])
        return Decision(_s(kind), _s(active) or None)

    def release(self, thread_id: str, run_id: str, turns: list[ChatMessage],
                followups: list[tuple[str, str]] | None = None) -> str | None:
        """Run ``run_id`` ended: record its turns (if it was active) and hand the thread on —
        to ``followups`` (``(run id, query)``, stored runs that go first), else the queue.
        Returns the thread's active run afterwards (None = idle)."""
        now = time.time()
        entry = dumps({"run_id": run_id, "messages": [m.model_dump(mode="json", exclude_none=True)
                                                      for m in turns]}) if turns else ""
        args: list[Any] = [run_id, entry, f"{now:.6f}", self.ttl]
        for rid, query in followups or []:
            args += [rid, dumps({"run_id": rid, "query": query, "created_at": round(now, 6)})]
        nxt = self._release(keys=self.keys.thread_keys(thread_id), args=args)
        return _s(nxt) or None

    def stop_kind(self, thread_id: str, run_id: str) -> str | None:
        """``interrupt`` / ``rollback`` when a newer run of the thread asked this one to stop."""
        raw = self.r.hget(self.keys.thread(thread_id), f"stop:{run_id}")
        return _s(raw) if raw else None

    def active(self, thread_id: str) -> str | None:
        raw = self.r.hget(self.keys.thread(thread_id), "active")
        return _s(raw) if raw else None

    def history(self, thread_id: str) -> list[ChatMessage]:
        """The thread's conversation so far: each ended run's turns, oldest first."""
        out: list[ChatMessage] = []
        for raw in self.r.lrange(self.keys.thread_history(thread_id), 0, -1):
            out += [ChatMessage.model_validate(m) for m in json.loads(raw)["messages"]]
        return out

    def runs(self, thread_id: str) -> list[dict[str, Any]]:
        """``{run_id, query, created_at}`` of every run made on the thread, oldest first."""
        return [json.loads(raw) for raw in self.r.lrange(self.keys.thread_runs(thread_id), 0, -1)]

    def keyed_run(self, idempotency_key: str, tenant: str) -> str | None:
        """The run ``tenant``'s idempotency key names (None: unused)."""
        raw = self.r.get(self.keys.idem(idempotency_key, tenant))
        return text(raw) if raw else None

    def claim_key(self, idempotency_key: str, tenant: str, run_id: str, ttl_seconds: int) -> bool:
        """Let the key name ``run_id`` (an injection's active run); False when it names one."""
        return bool(self.r.set(self.keys.idem(idempotency_key, tenant), run_id, nx=True, ex=ttl_seconds))

    def touch(self, thread_id: str) -> bool:
        """Refresh an idle thread's TTL (reading it is using it); False if there is none."""
        return bool(self._touch(keys=self.keys.thread_keys(thread_id), args=[self.ttl]))


#: A thread's run that was decided but never stored (its submitter died in between) is
#: skipped once its decision is this many seconds old.
ORPHAN_AFTER = 30.0


def skip_orphans(threads: ThreadStore, runs: RunStore, thread_id: str, nxt: str | None) -> str | None:
    """The thread's active run ``nxt``, after releasing any that was never stored and is
    older than ``ORPHAN_AFTER`` (a younger one is being stored by a live submitter, which
    sends it itself once it sees it active)."""
    for _ in range(100):
        if nxt is None or runs.r.exists(runs.keys.run(nxt)):
            return nxt
        entry = next((e for e in threads.runs(thread_id) if e.get("run_id") == nxt), None)
        if entry is not None and time.time() - float(entry.get("created_at", 0)) <= ORPHAN_AFTER:
            return None
        nxt = threads.release(thread_id, nxt, [])
    return nxt


def not_started(runs: RunStore, run_id: str | None) -> bool:
    """True for a stored run that has not taken its first step (so someone must send it)."""
    if run_id is None:
        return False
    status = runs.r.hget(runs.keys.run(run_id), "status")
    return status is not None and _s(status) == "queued"


def arm_first_step(client: redis.Redis, keys: Keys, run_id: str, after_seconds: float) -> None:
    """Let the watchdogs resend a thread run's first step if nobody starts it.

    The message that starts a run can die with a worker that received it before its task
    took the run's lease, and a run that never starts blocks its whole thread. So before it
    is sent, the run is made due (``shared/stores/due.py``): a watchdog resends it after
    ``after_seconds`` unless its task has taken it up. A duplicate first step is harmless:
    compare-and-set on ``step_no``, lease back-off.
    """
    client.zadd(keys.due, {run_member(run_id): int((time.time() + after_seconds) * 1000)})


def run_thread(request: dict[str, Any]) -> str | None:
    """The thread id of a stored run request (None = not on a thread)."""
    tid = request.get("thread_id")
    return tid if isinstance(tid, str) and tid else None


__all__ = ["ORPHAN_AFTER", "Decision", "ThreadStore", "arm_first_step", "not_started",
           "run_thread", "skip_orphans"]
