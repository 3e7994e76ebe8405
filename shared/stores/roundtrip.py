"""Fewer Redis round trips: operations that share one pipeline, reads that ride along with
another call, and writes that wait for the step's next round trip.

A step of the Celery shell (``workers/runs/drive.py``) reads what it needs in one round trip and
commits what it produced in one more. Two tools make that possible:

* ``Op`` is one command or one script call, queued into a pipeline by whoever sends the
  round trip; ``execute`` sends a list of them at once. Scripts go as ``EVAL`` with their
  body inside a pipeline: ``EVALSHA`` there would need redis-py's ``SCRIPT EXISTS`` check
  first (one more round trip per pipeline), and a ``NOSCRIPT`` half-way through a pipeline
  cannot be replayed safely (the commands around it already ran).
* ``riding`` opens a box for writes that need not go out at once — metrics counters, the
  flow limiter's settle of a finished LLM call, the run's token spend. ``defer`` puts them
  there (or runs them now when no box is open); the step's next round trip takes them along
  (``take``) and whatever is left goes out when the box closes. A crash loses them with the
  step, which is what the same crash lost before: a data point, a settle whose slot lease
  then expires, never an event or a tool call.

On a Redis Cluster a pipeline groups commands by node, with no order between nodes, and
redis-py's cluster pipeline refuses ``EVALSHA``: there ``execute`` sends plain commands in one
cluster pipeline and each script on its own, and callers never rely on an order across slots.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import redis
from redis.commands.core import Script

from reactq.shared.redisconn import is_cluster

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Op:
    """A plain command (``args``), or a call of ``script`` with ``keys`` and ``args``."""

    args: tuple[Any, ...]
    script: Script | None = None
    keys: tuple[str, ...] = ()

    @staticmethod
    def call(script: Script, keys: Sequence[str], args: Sequence[Any]) -> Op:
        return Op(tuple(args), script, tuple(keys))

    def queue(self, pipe: Any) -> None:
        if self.script is None:
            pipe.execute_command(*self.args)
        else:
            pipe.execute_command("EVAL", self.script.script, len(self.keys), *self.keys, *self.args)

    def run(self, client: redis.Redis) -> Any:
        """Alone: a script by its SHA (redis-py loads it on ``NOSCRIPT``)."""
        if self.script is None:
            return cast(Any, client).execute_command(*self.args)  # redis-py leaves it untyped
        return self.script(keys=list(self.keys), args=list(self.args), client=client)


def execute(client: redis.Redis, ops: Sequence[Op]) -> list[Any]:
    """Run ``ops`` in order: one round trip on one server (replies in order; an error is
    returned in its place, not raised, so that one failed write never hides the others).
    On a cluster: the plain commands in one cluster pipeline, then the scripts one by one."""
    if not ops:
        return []
    if len(ops) == 1:
        try:
            return [ops[0].run(client)]
        except redis.ResponseError as exc:
            return [exc]
    if is_cluster(client):
        return _execute_cluster(client, ops)
    pipe = client.pipeline(transaction=False)
    for op in ops:
        op.queue(pipe)
    return list(pipe.execute(raise_on_error=False))


def _execute_cluster(client: redis.Redis, ops: Sequence[Op]) -> list[Any]:
    out: list[Any] = [None] * len(ops)
    plain = [i for i, op in enumerate(ops) if op.script is None]
    if plain:
        pipe = client.pipeline(transaction=False)
        for i in plain:
            ops[i].queue(pipe)
        for i, reply in zip(plain, pipe.execute(raise_on_error=False), strict=True):
            out[i] = reply
    for i, op in enumerate(ops):
        if op.script is not None:
            try:
                out[i] = op.run(client)
            except redis.ResponseError as exc:
                out[i] = exc
    return out


def checked(reply: Any) -> Any:
    """A reply of ``execute`` that the caller needs: its error is raised here."""
    if isinstance(reply, Exception):
        raise reply
    return reply


class Read(Generic[T]):
    """Commands whose replies make one value: queued into another call's round trip (a lease
    taken together with the step's load), or run alone."""

    def __init__(self, ops: Sequence[Op], parse: Callable[[list[Any]], T]) -> None:
        self.ops = list(ops)
        self.parse = parse

    def run(self, client: redis.Redis) -> T:
        return self.parse([checked(r) for r in execute(client, self.ops)])


# -- writes that wait for the step's next round trip ---------------------------------------

_box: ContextVar[list[Op] | None] = ContextVar("reactq_riding", default=None)


@contextmanager
def riding(client: redis.Redis) -> Iterator[list[Op]]:
    """Writes deferred while the block runs go out with its round trips, or at its end."""
    box: list[Op] = []
    token = _box.set(box)
    try:
        yield box
    finally:
        _box.reset(token)
        flush(client, box)


def defer(client: redis.Redis, ops: Sequence[Op]) -> None:
    """Send ``ops`` with the step's next round trip; at once when no step is running."""
    box = _box.get()
    if box is not None:
        box.extend(ops)
    else:
        flush(client, list(ops))


def take() -> list[Op]:
    """The deferred writes, for a round trip about to go out (they leave the box)."""
    box = _box.get()
    if not box:
        return []
    out = box[:]
    del box[:len(out)]
    return out


def flush(client: redis.Redis, ops: list[Op]) -> None:
    """Send deferred writes now; a failure costs them (logged), never the caller."""
    try:
        failed(execute(client, ops))
    except redis.RedisError as exc:
        log.warning("deferred writes not sent: %s", exc)


def failed(replies: Sequence[Any]) -> None:
    """Log the errors among the replies of deferred writes (never raises)."""
    for reply in replies:
        if isinstance(reply, Exception):
            log.warning("deferred write failed: %s", reply)
