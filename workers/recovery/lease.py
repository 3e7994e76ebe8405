"""Leases: recover a crashed step in seconds, without waiting for the broker.

A task holds ``lease:{lease-N}:held:<member>`` (``SET NX PX``) while it runs and refreshes it
every ``ttl / 3``; the holder's task spec sits in the shard's ``tasks`` hash, left there if the
holder dies (how a crash is counted, ``workers/recovery/watchdog.py``). The keys of one shard share a Redis
Cluster hash tag (``{lease-N}``), so each script touches one slot, and the ``LEASE_SHARDS``
shards spread the lease traffic (every step pays it) over a cluster. A second delivery of a
step whose lease is alive backs off (returns at once); the step's own idempotency
(compare-and-set on ``step_no``, the tool ledger) makes a late duplicate harmless. What
brings a step back after its holder died, or after its message was lost before any task
took the lease, is the durable ``due`` record and its watchdog (``workers/recovery/watchdog.py``): a lease
only says "taken, and alive".

Cost per task (it is paid on every step): taking a lease is one round trip (a Lua script
sets the key and registers the member and its task together), which on one server also
carries the task's first read (``hold(read=...)``: the step's load); releasing it is
another, or none when the task's last round trip carries it (``handoff``: a step's final
commit). One heartbeat thread per process renews every lease the process holds, in one
pipelined round trip every ``ttl / 3``, instead of a thread started per task.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Generic, TypeVar

import redis
from redis.commands.core import Script
from kombu.exceptions import KombuError

from reactq.shared.keys import Keys
from reactq.shared.redisconn import is_cluster
from reactq.shared.stores.roundtrip import Op, Read, checked, execute

T = TypeVar("T")
#: What ``hold`` reads with the lease: given (lease key, token) when it shares the round trip.
Reader = Callable[[tuple[str, str] | None], Read[T]]

log = logging.getLogger(__name__)

#: Errors of the infrastructure, not of the step: a task that meets one keeps its lease.
OUTAGE_ERRORS: tuple[type[BaseException], ...] = (KombuError, redis.RedisError, OSError)

# KEYS: lease key, lease:tasks hash (one shard). ARGV: token, ttl ms, member, spec. Returns 0
# (held by someone else), 1 (taken), 2 (taken over from a holder that died: its record was
# still there, and nobody had counted that death yet). A lease's expiry is its key's TTL:
# whoever asks whether a step is held asks the key (``PTTL``), so nothing else records it.
_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local orphan = redis.call('HSET', KEYS[2], ARGV[3], ARGV[4]) == 0
  if orphan then return 2 end
  return 1
end
return 0
"""

# KEYS: lease key, lease:tasks hash. ARGV: token, member.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('HDEL', KEYS[2], ARGV[2])
  return 1
end
return 0
"""

# KEYS: lease key. ARGV: token, ttl ms.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

class Held(Generic[T]):
    """What ``hold`` yields: true when the lease is this task's. ``value()`` is what the
    ``read`` given to ``hold`` read (None without one)."""

    def __init__(self, ok: bool, read: Read[T] | None = None, replies: list[Any] | None = None,
                 client: redis.Redis | None = None) -> None:
        self.ok = ok
        self._read = read
        self._replies = replies
        self._client = client

    def __bool__(self) -> bool:
        return self.ok

    def value(self) -> T | None:
        if self._read is None:
            return None
        if self._replies is not None:
            return self._read.parse([checked(r) for r in self._replies])
        assert self._client is not None
        return self._read.run(self._client)


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
        self._local = threading.local()
        self._held: dict[str, tuple[str, str]] = {}  # token → (lease key, member)
        self._held_lock = threading.Lock()
        self._beat: threading.Thread | None = None
        self._cluster = is_cluster(client)

    def hold_only(self, member: str, task: str, args: list[Any], queue: str,
                  wait: float | None = None) -> AbstractContextManager[Held[None]]:
        """``hold`` with nothing read alongside the lease."""
        return self.hold(member, task, args, queue, wait=wait, read=None)

    @contextmanager
    def hold(self, member: str, task: str, args: list[Any], queue: str,
             wait: float | None = None, read: Reader[T] | None = None) -> Iterator[Held[T]]:
        """Hold the lease while the block runs; yields a false ``Held`` when someone else keeps it.

        A task may enqueue its successor before it releases its lease (a step that goes on
        after its commit; on a cluster, every step), so the successor may find the lease
        still held for a few milliseconds: it waits up to ``wait`` seconds (default: one
        TTL) before backing off. (A crash between the two loses nothing either way: the
        commit wrote the successor's due record.)

        ``read`` makes what the task reads first (its step's load): on one server it goes in
        the same round trip as the first try to take the lease, given (lease key, token) so
        that a write it makes can check the lease is this task's; on a cluster (another slot,
        no order across slots) it runs once the lease is taken. ``Held.value()`` returns it.
        """
        token = uuid.uuid4().hex
        key = self.keys.lease(member)
        deadline = time.monotonic() + (self.ttl_ms / 1000 if wait is None else wait)
        spec = json.dumps({"task": task, "args": args, "queue": queue, "worker": self.holder})
        lease_keys = [key, self.keys.lease_tasks_for(member)]
        first = read(None if self._cluster else (key, token)) if read is not None else None
        got, replies = self._try(lease_keys, token, member, spec, None if self._cluster else first)
        while not got:
            if time.monotonic() >= deadline:
                yield Held(False)
                return
            time.sleep(0.005)
            got, replies = self._try(lease_keys, token, member, spec, None)
        self._local.took_over = got == 2
        stack = self._stack()
        stack.append(token)
        with self._held_lock:
            self._held[token] = (key, member)
            if self._beat is None or not self._beat.is_alive():
                self._beat = threading.Thread(target=self._heartbeat, daemon=True,
                                              name="reactq-lease-heartbeat")
                self._beat.start()
        keep = False
        try:
            # Not read with the lease (a cluster, or taken on a later try): read it now.
            used = first if replies is not None or self._cluster or read is None else read(None)
            yield Held(True, used, replies, self.r)
        except OUTAGE_ERRORS:
            # The broker (or Redis) went away mid-task, e.g. after the step was committed but
            # before its successor was enqueued. Leave the lease to expire: the watchdog then
            # resends the step (resume-current) once the broker is back, instead of a run
            # that waits for good on a message that was never sent.
            keep = True
            raise
        finally:
            stack.remove(token)
            with self._held_lock:
                handed = self._held.pop(token, None) is None
            if not keep and not handed:
                self._release(keys=lease_keys, args=[token, member])

    def _try(self, lease_keys: list[str], token: str, member: str, spec: str,
             read: Read[Any] | None) -> tuple[int, list[Any] | None]:
        """One try to take the lease (with ``read`` in the same round trip): (0 not taken,
        1 taken, 2 taken over from a dead holder; the read's replies when taken)."""
        args: list[str | int] = [token, self.ttl_ms, member, spec]
        if read is None:
            return int(self._acquire(keys=lease_keys, args=args)), None
        replies = execute(self.r, [Op.call(self._acquire, lease_keys, args), *read.ops])
        got = int(checked(replies[0]))
        return got, replies[1:] if got else None

    def handoff(self) -> Op | None:
        """The release of this thread's innermost lease, for the caller to send in its last
        round trip (the commit that ends the task's work; the due record, written by that
        same commit, covers what follows). None on a cluster: the lease is in another slot,
        and without an order across slots it is released when ``hold`` exits, as usual.
        ``hold`` then neither renews nor releases it (if the round trip never goes out, the
        lease lapses within its TTL)."""
        stack = self._stack()
        if self._cluster or not stack:
            return None
        token = stack[-1]
        with self._held_lock:
            found = self._held.pop(token, None)
        if found is None:
            return None
        key, member = found
        keys = [key, self.keys.lease_tasks_for(member)]
        return Op.call(self._release, keys, [token, member])

    def _stack(self) -> list[str]:
        stack: list[str] | None = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

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
            calls = [([key], [token, self.ttl_ms]) for token, (key, _) in held]
            try:
                self._run_all(self._renew, calls)
            except redis.RedisError:  # a blip: the next beat tries again
                log.warning("lease heartbeat failed for %s", ", ".join(m for _, (_, m) in held))

    def took_over(self) -> bool:
        """Whether this thread's last lease was taken over from a holder that died."""
        return bool(getattr(self._local, "took_over", False))

    def _run_all(self, script: Script, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        """One script call per (keys, args): pipelined on one server; on a cluster one by one,
        since each call may go to another shard (redis-py's cluster pipeline runs no scripts)."""
        if is_cluster(self.r):
            return [script(keys=k, args=a) for k, a in calls]
        pipe = self.r.pipeline(transaction=False)
        for k, a in calls:
            script(keys=k, args=a, client=pipe)
        return list(pipe.execute())
