"""A tool task's two round trips (``workers/runs/toolcall.py``), over the run store's keys.

* ``open``: the pending turn and the call's ledger record, and the claim of the call (its
  ``pending`` record) when nobody made one — one script, which a single server runs in the
  same round trip as the lease (the claim then checks that the lease is this task's).
* ``close``: the call's outcome (the first "done" wins: a late worker is refused), the call
  counted into the turn's fan-in, the call no longer due and, once the turn is complete,
  the run's next step due — one script, carrying the tool's metrics (applied only when this
  outcome won) and whatever the caller sends along (the lease hand-off).

Exactly-once is the ledger's, as before: a call runs when its record was absent at ``open``
(the task claimed it); a record left ``pending`` says an earlier delivery started it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from reactq.shared.stores.due import deadline_ms, run_member, tool_member
from reactq.shared.engine.state import ToolOutcome
from reactq.shared.events import dumps
from reactq.shared.redisconn import is_cluster
from reactq.shared.stores.roundtrip import Op, Read, checked, execute, failed
from reactq.shared.stores.runs import RunStore
from reactq.shared.stores.runs_lua import CLOSE_CALL, OPEN_CALL, inline_ops


@dataclass
class OpenedCall:
    """What ``open`` read: the pending turn (None: no turn) and the call's ledger record as
    it was before this task (None: there was none, and the task has claimed the call)."""

    turn: dict[str, Any] | None
    record: dict[str, Any] | None
    token: str = ""
    """The claim's token (what a request for approval checks the claim by)."""


class CallLedger:
    def __init__(self, store: RunStore) -> None:
        self.store = store
        self.keys = store.keys
        self.cluster = is_cluster(store.r)
        self._open = store.r.register_script(OPEN_CALL)
        self._close = store.r.register_script(CLOSE_CALL)

    def open(self, run_id: str, step_no: int, call_id: str, token: str,
             lease: tuple[str, str] | None = None) -> Read[OpenedCall]:
        """The read (and claim) at a call's start; ``lease`` = (key, token) when it shares
        the lease's round trip, so that only the holder claims."""
        keys = [self.keys.run(run_id), self.keys.run_tools(run_id)]
        pending = dumps({"status": "pending", "token": token, "step_no": step_no, "at": time.time()})
        if lease is not None:
            keys.append(lease[0])

        def parse(replies: list[Any]) -> OpenedCall:
            turn, record = replies[0]
            return OpenedCall(json.loads(turn) if turn else None, json.loads(record) if record else None,
                              token)

        args = [step_no, call_id, pending, lease[1] if lease else ""]
        return Read([Op.call(self._open, keys, args)], parse)

    def close(self, run_id: str, step_no: int, call_id: str, outcome: ToolOutcome | None, calls: int,
              *, ops: list[Op] | None = None, then: list[Op] | None = None,
              first: list[Op] | None = None, push: tuple[str, str] | None = None) -> tuple[bool, int]:
        """Record ``outcome`` (None: already done) and count the call in. Returns (whether
        this outcome was recorded, how many of the turn's ``calls`` are in). ``ops`` go with
        a recorded outcome; ``then`` in the same round trip (on a cluster: after it), ``first``
        before it (the call's live ``iteration done``, ``callevents``). ``push`` (list key,
        payload: the fan-in's broker message, on one server that is also the broker) is
        ``LPUSH``ed by the close's script once all ``calls`` are in. A run left ``waiting`` by
        the close (the rest of its turn waits for a person) is moved in the run index."""
        if push is not None and self.cluster:
            raise ValueError("a close on a Redis Cluster cannot carry a broker message")
        store, cluster = self.store, self.cluster
        record = "" if outcome is None else dumps(
            {"status": "done", "step_no": step_no, "outcome": outcome.model_dump(mode="json")})
        deadline = deadline_ms(store.due_seconds)
        keys = [self.keys.run_tools(run_id), self.keys.run_fanin(run_id, step_no), self.keys.run(run_id)]
        op_keys, op_args = inline_ops([] if cluster else ops or [])
        if not cluster:
            keys += [self.keys.due, *op_keys]
        args = [call_id, record, max(store.ttl, 3600), tool_member(run_id, call_id), run_member(run_id),
                calls, deadline, step_no, "0" if cluster else "1", *op_args]
        before = first or []
        if push is not None:
            keys.append(push[0])
            args += [1, len(keys), push[1]]
        if not cluster:
            replies = execute(store.r, [*before, Op.call(self._close, keys, args), *(then or [])])
            failed(replies[:len(before)] + replies[len(before) + 1:])
            won, count, _, waiting = checked(replies[len(before)])
            if int(waiting):
                store.move_status(run_id, "waiting")
            return bool(won), int(count)
        failed(execute(store.r, before))
        won, count, ready, waiting = self._close(keys=keys, args=args)
        if int(waiting):
            store.move_status(run_id, "waiting")
        pipe = store.r.pipeline(transaction=False)
        pipe.zrem(self.keys.due, tool_member(run_id, call_id))
        if int(ready):
            pipe.zadd(self.keys.due, {run_member(run_id): deadline})
        pipe.execute()
        if won:
            failed(execute(store.r, ops or []))
        failed(execute(store.r, then or []))
        return bool(won), int(count)
