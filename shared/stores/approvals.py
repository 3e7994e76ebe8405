"""Approvals in Redis: requests, decisions, the run's list and the operators' inbox.

A call that waits holds nothing: no task, lease, or due member of its own or of its run;
its approval's member in ``due`` (``approval:{run}:{call}``) fires at ``expires_at`` and
the watchdog applies ``on_timeout`` (``workers/recovery/approvals.py``). The request, each
decision and its effect are one script each (``approvals_lua.py``), over the run's keys:

* ``request`` (the tool task that claimed the call): the approval record, the call's
  ``waiting`` ledger record, the ``approval {status: "requested"}`` event, the run
  ``waiting`` once nothing else of its turn is out;
* ``decide``: the decision (only while pending, only for the digest of the arguments the
  person saw) with its effect — the call's ``approved`` ledger record and its due member
  (the tool task then claims and runs it once: the ledger's exactly-once-or-uncertain), or
  the call's answer counted into the turn's fan-in and the run's next step made due.

A duplicate POST, a second decider or a decider killed half-way find the record decided
(409, naming the first decision) or the script not run at all; nothing can make a call due
twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import redis

from reactq.shared.stores.due import approval_member, deadline_ms, run_member, tool_member
from reactq.shared.engine import approval as A
from reactq.shared.engine.callevents import done_data, start_data
from reactq.shared.engine.state import ToolOutcome
from reactq.shared.models import ToolCallRequest
from reactq.shared.errors import ApprovalConflict, RequestError, RunNotFound
from reactq.shared.events import dumps
from reactq.shared.keys import Keys
from reactq.shared.observe.metrics_schema import FAMILIES, bucket_of, label_field
from reactq.shared.redisconn import is_cluster
from reactq.shared.stores.approvals_lua import ANNOUNCE, CANCEL, DECIDE, REQUEST
from reactq.shared.stores.roundtrip import Op
from reactq.shared.stores.runs_index import decode_cursor, encode_cursor
from reactq.shared.stores.streams import text
from reactq.shared.tenants.tenancy import owner_of
from reactq.shared.wire import ITERATE, RUNS_QUEUE, TOOL, TOOLS_QUEUE

MAX_LIMIT = 500
FIELD = "approval:"


def field_of(approval_id: str) -> str:
    return FIELD + approval_id


def inbox_member(run_id: str, approval_id: str) -> str:
    return f"{run_id}/{approval_id}"


@dataclass
class Requested:
    """What ``request`` did: ``code`` 1 requested, 0 the claim was not this task's, -1 the
    run is asked to stop; the status move for the run index."""

    code: int
    record: dict[str, Any]
    old: str = ""
    new: str = ""
    created_at: float = 0.0


@dataclass
class Decided:
    """A decision taken: the record as decided and what to send now (the due records the
    decision wrote cover a send that is lost)."""

    record: dict[str, Any]
    sends: list[tuple[str, list[Any], str]] = field(default_factory=list)
    old: str = ""
    new: str = ""
    created_at: float = 0.0


class ApprovalStore:
    def __init__(self, client: redis.Redis, keys: Keys, *, maxlen: int = 10_000, due_seconds: float = 5.0,
                 fanin_ttl: int = 86400) -> None:
        self.r = client
        self.keys = keys
        self.maxlen = maxlen
        self.due_seconds = due_seconds
        self.fanin_ttl = max(fanin_ttl, 3600)
        self.cluster = is_cluster(client)
        self._request = client.register_script(REQUEST)
        self._decide = client.register_script(DECIDE)
        self._cancel = client.register_script(CANCEL)
        self._announce = client.register_script(ANNOUNCE)

    def _keys(self, run_id: str, step_no: int) -> list[str]:
        k = self.keys
        keys = [k.run(run_id), k.run_tools(run_id), k.run_events(run_id), k.run_fanin(run_id, step_no)]
        return keys if self.cluster else keys + [k.due, k.approvals_pending]

    # -- the request (a tool task) ----------------------------------------------------
    def request(self, record: dict[str, Any], *, token: str, step_no: int, calls: int,
                now: float | None = None) -> Requested:
        now = time.time() if now is None else now
        run_id, call_id, aid = record["run_id"], record["tool_call_id"], record["approval_id"]
        waiting = dumps({"status": "waiting", "approval_id": aid, "step_no": step_no})
        expires = int(record["expires_at"] * 1000)
        args = [call_id, token, waiting, field_of(aid), dumps(record), dumps(A.requested_event(record)),
                self.maxlen, calls, tool_member(run_id, call_id), run_member(run_id),
                approval_member(run_id, call_id), expires, inbox_member(run_id, aid),
                record["requested_at"], f"{now:.6f}", "0" if self.cluster else "1"]
        out = self._request(keys=self._keys(run_id, step_no), args=args)
        code = int(out[0])
        if code == 1 and self.cluster:
            pipe = self.r.pipeline(transaction=False)
            pipe.zrem(self.keys.due, tool_member(run_id, call_id), run_member(run_id))
            pipe.zadd(self.keys.due, {approval_member(run_id, call_id): expires})
            pipe.zadd(self.keys.approvals_pending, {inbox_member(run_id, aid): record["requested_at"]})
            pipe.execute()
        if code != 1:
            return Requested(code, record)
        return Requested(1, record, text(out[1]), text(out[2]), float(text(out[3]) or 0))

    def announce(self, run_id: str, step_no: int, call_id: str, data: dict[str, Any]) -> bool:
        """Publish a call's own ``step`` event in a turn with held calls (``callevents``), unless
        the turn is over, the run is asked to stop or the call is done. Whether it went out."""
        return int(self.announce_op(run_id, step_no, call_id, data).run(self.r)) > 0

    def announce_op(self, run_id: str, step_no: int, call_id: str, data: dict[str, Any]) -> Op:
        """``announce`` for a round trip of someone else's (a call's close: in the same write)."""
        keys = [self.keys.run(run_id), self.keys.run_tools(run_id), self.keys.run_events(run_id)]
        return Op.call(self._announce, keys, [call_id, step_no, self.maxlen, dumps(data)])

    # -- reads ------------------------------------------------------------------------
    def get(self, run_id: str, approval_id: str) -> dict[str, Any] | None:
        raw = self.r.hget(self.keys.run_tools(run_id), field_of(approval_id))
        return json.loads(raw) if raw else None

    def for_run(self, run_id: str) -> list[dict[str, Any]]:
        """The run's approvals, oldest first."""
        found = [json.loads(v) for _, v in self.r.hscan_iter(self.keys.run_tools(run_id), match=FIELD + "*",
                                                              count=500)]
        return sorted(found, key=lambda a: (a["requested_at"], a["approval_id"]))

    def inbox(self, *, limit: int = 50, cursor: str | None = None,
              sees: Callable[[str], bool] | None = None) -> dict[str, Any]:
        """Pending approvals of every run, oldest first: ``{approvals, next_cursor}``; with
        ``sees``, only those of runs whose tenant it accepts."""
        if not 1 <= limit <= MAX_LIMIT:
            raise RequestError(f"limit must be between 1 and {MAX_LIMIT}", field="limit")
        low: str = "-inf"
        after = decode_cursor(cursor) if cursor else None
        if after is not None:
            low = repr(after[0])
        rows: list[dict[str, Any]] = []
        while len(rows) < limit:
            window = self.r.zrangebyscore(self.keys.approvals_pending, low, "+inf", start=0,
                                          num=limit + 16, withscores=True)
            cands = [(text(m), float(s)) for m, s in cast(list[tuple[Any, float]], window)]
            if after is not None:
                cands = [(m, s) for m, s in cands if s > after[0] or (s == after[0] and m > after[1])]
            if not cands:
                return {"approvals": rows, "next_cursor": None}
            for member, score in cands[:limit - len(rows)]:
                after = (score, member)
                rec = self._pending(member)
                if rec is not None and (sees is None or sees(self._tenant(rec["run_id"]))):
                    rows.append(rec)
            low = repr(after[0]) if after else low
        more = after is not None and len(rows) == limit
        return {"approvals": rows, "next_cursor": encode_cursor(*after) if more and after else None}

    def _pending(self, member: str) -> dict[str, Any] | None:
        """The record an inbox member names while it is pending (else the member goes)."""
        run_id, _, aid = member.partition("/")
        rec = self.get(run_id, aid)
        if rec is None or rec.get("status") != "pending":
            self.r.zrem(self.keys.approvals_pending, member)
            return None
        return rec

    def _tenant(self, run_id: str) -> str:
        return owner_of(self.r.hget(self.keys.run(run_id), "tenant"))

    def pending_count(self) -> int:
        return int(self.r.zcard(self.keys.approvals_pending))

    # -- decisions --------------------------------------------------------------------
    def decide(self, run_id: str, approval_id: str, decision: str, *, digest: str | None,
               args: dict[str, Any] | None = None, message: str | None = None, by: str | None = None,
               now: float | None = None) -> Decided:
        """Take ``decision`` (approve, edit, reject, respond; ``expire``: the watchdog's) on a
        pending approval. ``RunNotFound`` for an unknown one; ``ApprovalConflict`` when it was
        decided already, for another digest, or when the run is stopping."""
        now = time.time() if now is None else now
        pipe = self.r.pipeline(transaction=False)
        pipe.hget(self.keys.run(run_id), "turn")
        pipe.hget(self.keys.run_tools(run_id), field_of(approval_id))
        turn_raw, raw = pipe.execute()
        if raw is None:
            raise RunNotFound(f"run {run_id!r} has no approval {approval_id!r}")
        record = json.loads(raw)
        _check_open(record, digest)
        turn: dict[str, Any] = json.loads(turn_raw) if turn_raw else {"step_no": -1, "calls": []}
        status = "expired" if decision == "expire" else A.DECIDED[decision]
        decided = A.decided_record(record, status, decided_at=now, by=by,
                                   args=args if decision == "edit" else None, message=message)
        effect = A.effect(decision, record.get("on_timeout", "reject"))
        outcome = A.answer_outcome(record, decision, message, now) if effect == "answer" else None
        follow = _follow_up(turn, record, decided, outcome, now)
        ledger = self._ledger_record(record, decided, effect, outcome, int(turn["step_no"]))
        call_id = record["tool_call_id"]
        deadline = deadline_ms(self.due_seconds)
        argv = [call_id, field_of(approval_id), digest or "", dumps(decided), dumps(A.decided_event(decided)),
                self.maxlen, effect, ledger, len(turn["calls"]), turn["step_no"], tool_member(run_id, call_id),
                run_member(run_id), approval_member(run_id, call_id), deadline,
                inbox_member(run_id, approval_id), self.fanin_ttl, f"{now:.6f}", "0" if self.cluster else "1",
                dumps(follow) if follow else ""]
        out = self._decide(keys=self._keys(run_id, int(turn["step_no"])), args=argv)
        code = int(out[0])
        if code != 1:
            current = json.loads(out[1]) if code != 0 else None
            if code == 0:
                raise RunNotFound(f"run {run_id!r} has no approval {approval_id!r}")
            if code == 4:
                raise ApprovalConflict(f"run {run_id} is stopping or has ended: approval {approval_id} "
                                       "can no longer be decided", current)
            _check_open(current or {}, digest)
        ready = int(out[4]) == 1
        if self.cluster:
            self._cluster_due(run_id, call_id, approval_id, effect, ready, deadline)
        self._count(decided)
        sends: list[tuple[str, list[Any], str]] = []
        if effect == "run":
            sends.append((TOOL, [run_id, turn["step_no"], call_id, record["tool_name"]], TOOLS_QUEUE))
        if ready:
            sends.append((ITERATE, [run_id, turn["step_no"]], RUNS_QUEUE))
        return Decided(decided, sends, text(out[2]), text(out[3]), float(text(out[5]) or 0))

    def _count(self, decided: dict[str, Any]) -> None:
        """The decision's metrics (``approval_decisions``, ``approval_wait_seconds``); never raises."""
        status = str(decided["status"])
        wait = max(0.0, float(decided["decided_at"]) - float(decided["requested_at"]))
        fam = FAMILIES["approval_wait_seconds"]
        shard = Keys.metrics_shard(str(decided["run_id"]))
        try:
            pipe = self.r.pipeline(transaction=False)
            pipe.hincrby(self.keys.metrics("approval_decisions", shard), label_field([status]), 1)
            hist = self.keys.metrics(fam.name, shard)
            pipe.hincrby(hist, label_field([status, bucket_of(fam, wait)]), 1)
            pipe.hincrbyfloat(hist, label_field([status, "sum"]), wait)
            pipe.execute()
        except redis.RedisError:
            pass

    def _ledger_record(self, record: dict[str, Any], decided: dict[str, Any], effect: str,
                       outcome: ToolOutcome | None, step_no: int) -> str:
        """The call's ledger record the decision writes: ``approved`` (to run, with the
        arguments to run it with) or ``done`` with its answer (``outcome``)."""
        if effect == "run" or outcome is None:
            args = decided.get("approved_args", record["tool_args"])
            return dumps({"status": "approved", "approval_id": record["approval_id"], "approval": decided["status"],
                          "args": dumps(args), "edited": "approved_args" in decided, "step_no": step_no})
        return dumps({"status": "done", "step_no": step_no, "outcome": outcome.model_dump(mode="json")})

    def _cluster_due(self, run_id: str, call_id: str, approval_id: str, effect: str, ready: bool,
                     deadline: int) -> None:
        pipe = self.r.pipeline(transaction=False)
        pipe.zrem(self.keys.due, approval_member(run_id, call_id))
        pipe.zrem(self.keys.approvals_pending, inbox_member(run_id, approval_id))
        if effect == "run":
            pipe.zadd(self.keys.due, {tool_member(run_id, call_id): deadline})
        if ready:
            pipe.zadd(self.keys.due, {run_member(run_id): deadline})
        pipe.execute()

    def cancel_pending(self, run_id: str, now: float | None = None) -> list[dict[str, Any]]:
        """The run has ended: its pending approvals become ``cancelled``. Returns them."""
        now = time.time() if now is None else now
        pending = [a for a in self.for_run(run_id) if a["status"] == "pending"]
        if not pending:
            return []
        args: list[Any] = ["0" if self.cluster else "1"]
        for a in pending:
            done = A.decided_record(a, "cancelled", decided_at=now, by=None)
            args += [field_of(a["approval_id"]), dumps(done), approval_member(run_id, a["tool_call_id"]),
                     inbox_member(run_id, a["approval_id"])]
        keys = [self.keys.run_tools(run_id), self.keys.run(run_id)]
        if not self.cluster:
            keys += [self.keys.due, self.keys.approvals_pending]
        self._cancel(keys=keys, args=args)
        if self.cluster:
            pipe = self.r.pipeline(transaction=False)
            for a in pending:
                pipe.zrem(self.keys.due, approval_member(run_id, a["tool_call_id"]))
                pipe.zrem(self.keys.approvals_pending, inbox_member(run_id, a["approval_id"]))
            pipe.execute()
        return pending


def approvals_of(store: Any) -> ApprovalStore:
    """The approval store beside a ``RunStore`` (same client, keys and bounds)."""
    return ApprovalStore(store.r, store.keys, maxlen=store.maxlen, due_seconds=store.due_seconds,
                         fanin_ttl=store.ttl)


def _follow_up(turn: dict[str, Any], record: dict[str, Any], decided: dict[str, Any],
               outcome: ToolOutcome | None, now: float) -> dict[str, Any] | None:
    """The call's ``step`` event the decision publishes after its ``approval`` event, in a turn
    with held calls (``callevents``): the ``iteration start`` of a call that now runs, or the
    ``iteration done`` of one answered (then marked announced: the fan-in skips it)."""
    if not turn.get("held"):
        return None
    call = ToolCallRequest(id=record["tool_call_id"], name=record["tool_name"], arguments=record["tool_args"])
    if outcome is None:
        return start_data(int(turn["iteration"]), call, approved_args=decided.get("approved_args"))
    outcome.announced = True
    return done_data(int(turn["iteration"]), call, outcome, float(turn["tools_started_at"]), now)


def _check_open(record: dict[str, Any], digest: str | None) -> None:
    """``ApprovalConflict`` when ``record`` is decided or was requested for another digest."""
    if record.get("status") != "pending":
        by = f" by {record['decided_by']}" if record.get("decided_by") else ""
        raise ApprovalConflict(f"approval {record.get('approval_id')} was already decided: "
                               f"{record.get('status')}{by}", record)
    if digest and digest != record.get("args_digest"):
        raise ApprovalConflict(f"args_digest does not match approval {record.get('approval_id')}: "
                               f"its arguments' digest is {record.get('args_digest')}", record)
