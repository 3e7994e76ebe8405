"""Leases: recover a crashed step in seconds, without waiting for the broker.

A task holds ``lease:{lease-N}:held:<member>`` (``SET NX PX``) while it runs and refreshes it
every ``ttl / 3``; the member also sits in its shard's ``leases`` sorted set (score = expiry,
ms) with the task's name and arguments in the shard's ``tasks`` hash. The three keys of one
shard share a Redis Cluster hash tag (``{lease-N}``), so each script touches one slot, and
the ``LEASE_SHARDS`` shards spread the lease traffic (every step pays it) over a cluster. Every worker runs a watchdog thread that
looks for expired members and sends their task again. A second delivery of a step whose
lease is alive backs off (returns at once); the step's own idempotency (compare-and-set on
``step_no``, the tool ledger) makes a late duplicate harmless.

Cost per task (it is paid on every step): taking a lease is one round trip (a Lua script
sets the key and registers the member and its task together) and releasing it another;
one heartbeat thread per process renews every lease the process holds, in one pipelined
round trip every ``ttl / 3``, instead of a thread started per task.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
from redis.commands.core import Script
from kombu.exceptions import KombuError

from reactq.shared.keys import LEASE_SHARDS, Keys
from reactq.shared.redisconn import is_cluster

log = logging.getLogger(__name__)

#: Errors of the infrastructure, not of the step: a task that meets one keeps its lease.
OUTAGE_ERRORS: tuple[type[BaseException], ...] = (KombuError, redis.RedisError, OSError)

# KEYS: lease key, leases zset, lease:tasks hash. ARGV: token, ttl ms, expiry ms, member, spec.
_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
  redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
  return 1
end
return 0
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[2])
  redis.call('HDEL', KEYS[3], ARGV[2])
  return 1
end
return 0
"""

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
  return 1
end
return 0
"""

# Claim expired members for resending: push their expiry forward so only one watchdog
# resends each. KEYS: leases zset, lease:tasks hash (one shard). ARGV: now ms, grace ms,
# the shard's held-key prefix (the keys it builds are in the same slot).
_CLAIM = """
local out = {}
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 100)
for _, m in ipairs(expired) do
  if redis.call('EXISTS', ARGV[3] .. m) == 0 then
    local spec = redis.call('HGET', KEYS[2], m)
    if spec then
      redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[2]), m)
      table.insert(out, spec)
    else
      redis.call('ZREM', KEYS[1], m)
    end
  end
end
return out
"""


class Leases:
    def __init__(self, client: redis.Redis, keys: Keys, ttl_seconds: float = 3.0,
                 holder: str = "") -> None:
        self.r = client
        self.holder = holder
        self.keys = keys
        self.ttl_ms = int(ttl_seconds * 1000)
        self._acquire = client.register_script(_ACQUIRE)
        self._release = client.register_script(_RELEASE)
        self._renew = client.register_script(_RENEW)
        self._claim = client.register_script(_CLAIM)
        self._held: dict[str, tuple[str, str]] = {}  # token → (lease key, member)
        self._held_lock = threading.Lock()
        self._beat: threading.Thread | None = None

    @contextmanager
    def hold(self, member: str, task: str, args: list[Any], queue: str,
             wait: float | None = None) -> Iterator[bool]:
        """Hold the lease while the block runs; yields False when someone else keeps it.

        A task enqueues its successor before it releases its lease (so that a crash in
        between loses nothing), so the successor may find the lease still held for a few
        milliseconds: it waits up to ``wait`` seconds (default: one TTL) before backing off.
        """
        token = uuid.uuid4().hex
        key = self.keys.lease(member)
        deadline = time.monotonic() + (self.ttl_ms / 1000 if wait is None else wait)
        spec = json.dumps({"task": task, "args": args, "queue": queue, "worker": self.holder})
        lease_keys = [key, self.keys.leases_for(member), self.keys.lease_tasks_for(member)]
        while not self._acquire(keys=lease_keys, args=[token, self.ttl_ms, _now_ms() + self.ttl_ms,
                                                       member, spec]):
            if time.monotonic() >= deadline:
                yield False
                return
            time.sleep(0.005)
        with self._held_lock:
            self._held[token] = (key, member)
            if self._beat is None or not self._beat.is_alive():
                self._beat = threading.Thread(target=self._heartbeat, daemon=True,
                                              name="reactq-lease-heartbeat")
                self._beat.start()
        keep = False
        try:
            yield True
        except OUTAGE_ERRORS:
            # The broker (or Redis) went away mid-task, e.g. after the step was committed but
            # before its successor was enqueued. Leave the lease to expire: the watchdog then
            # resends the step (resume-current) once the broker is back, instead of a run
            # that waits for good on a message that was never sent.
            keep = True
            raise
        finally:
            with self._held_lock:
                self._held.pop(token, None)
            if not keep:
                self._release(keys=lease_keys, args=[token, member])

    def alive(self, member: str) -> bool:
        return bool(self.r.exists(self.keys.lease(member)))

    def _heartbeat(self) -> None:
        """Renew every lease this process holds, every ``ttl / 3`` (one pipelined round trip)."""
        interval = self.ttl_ms / 3000
        while True:
            time.sleep(interval)
            with self._held_lock:
                held = list(self._held.items())
            if not held:
                continue
            expiry = _now_ms() + self.ttl_ms
            calls = [([key, self.keys.leases_for(member)], [token, self.ttl_ms, expiry, member])
                     for token, (key, member) in held]
            try:
                self._run_all(self._renew, calls)
            except redis.RedisError:  # a blip: the next beat tries again
                log.warning("lease heartbeat failed for %s", ", ".join(m for _, (_, m) in held))

    def claim_expired(self) -> list[dict[str, Any]]:
        """Specs of tasks whose holder died; each is returned to one caller only."""
        grace, now = self.ttl_ms * 3, _now_ms()
        calls = [([self.keys.leases_of(n), self.keys.lease_tasks_of(n)],
                  [now, grace, self.keys.lease_held_prefix(n)]) for n in range(LEASE_SHARDS)]
        return [json.loads(s) for raw in self._run_all(self._claim, calls) for s in raw]

    def _run_all(self, script: Script, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        """One script call per (keys, args): pipelined on one server; on a cluster one by one,
        since each call may go to another shard (redis-py's cluster pipeline runs no scripts)."""
        if is_cluster(self.r):
            return [script(keys=k, args=a) for k, a in calls]
        pipe = self.r.pipeline(transaction=False)
        for k, a in calls:
            script(keys=k, args=a, client=pipe)
        return list(pipe.execute())


class Watchdog(threading.Thread):
    """Resends tasks whose lease expired; one per worker process."""

    def __init__(self, leases: Leases, send: Callable[[str, list[Any], str], None],
                 interval: float = 1.0) -> None:
        super().__init__(daemon=True, name="reactq-watchdog")
        self.leases = leases
        self.send = send
        self.interval = interval
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                for spec in self.leases.claim_expired():
                    log.warning("resuming %s%s: its worker stopped", spec["task"], spec["args"])
                    self.send(spec["task"], spec["args"], spec["queue"])
            except Exception:  # keep watching whatever happens
                log.exception("watchdog pass failed")


def _now_ms() -> int:
    return int(time.time() * 1000)
