"""The run store: run state, events, interrupts and the tool ledger in Redis.

Events are written only by two Lua scripts, both guarded by the run's ``pub_seq`` (the
seq of the last published event): an event whose seq is not above it is skipped. Since
the engine assigns seqs deterministically from the saved state, a redelivered step
re-creates the same seqs and publishes nothing twice. ``commit`` saves the state with
compare-and-set on ``step_no`` and publishes the step's events in the same script, so
state and events never disagree.

A worker's step makes two round trips of its own here (``workers/runs/drive.py``): ``load_step``
(the run, the interrupts after the committed cursor and the ledger records of the pending
turn, in one script) and ``commit`` (which carries the step's metrics when it wins, and
whatever the caller sends with it: the lease hand-off, deferred writes). ``after_llm`` is the
read a step needs after its LLM call (new interrupts, the cancel flag).
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any, assert_never, get_args

import redis

from reactq.shared.stores.crashes import FIELD as CRASH_FIELD, count_crash
from reactq.shared.stores.due import PARKED_MS, deadline_ms, now_ms, run_member, tool_member
from reactq.shared.engine.next import Answer, CallLLM, Done, Next, RunTools, SelectTools, next_step
from reactq.shared.engine.result import turn_summary
from reactq.shared.engine.state import Interrupt, RunState, Status, ToolOutcome, dump_state
from reactq.shared.errors import RunNotFound
from reactq.shared.events import Event, dumps
from reactq.shared.stores.idempotency import create_once
from reactq.shared.stores.run_hash import RunActivity, RunRecord, interrupts_of, outcomes_of, record_of
from reactq.shared.keys import Keys
from reactq.shared.redisconn import is_cluster
from reactq.shared.stores.roundtrip import Op, Read, checked, execute, failed
from reactq.shared.stores.runs_lua import AFTER_LLM, COMMIT, FANIN, LEDGER_DONE, LOAD, inline_ops
from reactq.shared.stores.streams import PUBLISH, entries_after, read_events, text, triples
from reactq.shared.tenants.tenancy import DEFAULT_TENANT, owned_name, owner_of, thread_key

# The statuses the run index keeps a set for.
RUN_STATUSES: tuple[str, ...] = get_args(Status)

class RunStore:
    """Synchronous access to runs (workers, CLI). One instance per process is enough."""

    def __init__(self, client: redis.Redis, *, keys: Keys | None = None,
                 ttl_seconds: int = 86400, maxlen: int = 10_000, due_seconds: float = 5.0) -> None:
        self.r = client
        # Committed work not taken up within this long is sent again (workers/recovery/watchdog.py).
        self.due_seconds = due_seconds
        # On a Redis Cluster the due set is in another slot than the run: written just after.
        self._cluster = is_cluster(client)
        self.keys = keys or Keys()
        self.ttl = ttl_seconds
        self.maxlen = maxlen
        # Idempotency keys and the run index outlive any run (queued + running + TTL).
        self._index_ttl = ttl_seconds + 7 * 86400
        self._publish = client.register_script(PUBLISH)
        self._commit = client.register_script(COMMIT)
        self._load = client.register_script(LOAD)
        self._after_llm = client.register_script(AFTER_LLM)
        self._fanin = client.register_script(FANIN)
        self._ledger_done = client.register_script(LEDGER_DONE)

    # -- runs -------------------------------------------------------------------------
    def create(self, run_id: str, request: dict[str, Any], *, idempotency_key: str | None = None,
               batch_id: str | None = None, schedule_id: str | None = None,
               scheduled_for: str | None = None, tenant: str = DEFAULT_TENANT,
               batch_cost_budget_usd: float | None = None,
               replay: dict[str, Any] | None = None, seed: RunState | None = None,
               forked_from: dict[str, Any] | None = None) -> tuple[str, bool]:
        """Store a new queued run. With a key already used, returns ``(existing_id, False)``.

        The run hash, the run index (``reactq.shared.stores.runs_index``: ``runs``,
        ``runs:status:queued`` and, when given, the batch's and thread's sets) and the
        idempotency key live in different slots of a Redis Cluster, so no one script may write
        them all (see ``keys.py``). The order makes a submitter killed half-way harmless: the
        run and its index rows are written first, the key claimed last (``SET NX``, in
        ``reactq.shared.stores.idempotency``), so a key never points at no run. With a key, pass the
        id ``idempotent_id(key)`` names: the record is written only if absent, so the retry
        of a submitter killed before its claim finds and claims the run it wrote.

        A schedule's run records ``schedule_id`` (and, for a tick, ``scheduled_for``: the
        nominal tick, ISO-8601 UTC) and is filed under ``runs:schedule:{name}`` (its
        tenant's name for it, ``tenancy.owned_name``). A line of a batch with a dollar cap
        records it (``batch_cost_budget_usd``): the workers hold each of its calls against
        the batch's spend (``batch:{id}:spend``). ``replay`` (a ``ReplayPolicy`` as JSON):
        recorded calls of another run answer this run's calls (``engine/recorded.py``).
        A fork (``forked_from``: ``{run_id, turn}``) starts from ``seed``, its first state (its
        parent's history), and is filed under ``runs:forked_from:{parent}``.
        """
        now = time.time()
        thread_id = request.get("thread_id") or ""  # indexed when the request carries one
        fields: dict[Any, str | int] = {"status": "queued", "request": dumps(request),
                                  "created_at": f"{now:.6f}", "updated_at": f"{now:.6f}",
                                  "step_no": 0, "pub_seq": 0, "tenant": tenant}
        if batch_id:
            fields["batch_id"] = batch_id
            if batch_cost_budget_usd is not None:
                fields["batch_cost_budget_usd"] = repr(batch_cost_budget_usd)
        if thread_id:
            fields["thread_id"] = thread_id
        if schedule_id:
            fields["schedule_id"] = schedule_id
        if scheduled_for:
            fields["scheduled_for"] = scheduled_for
        if replay:
            fields["replay"] = dumps(replay)
        if seed is not None:
            fields["seed"] = dump_state(seed)
        parent = (forked_from or {}).get("run_id")
        if forked_from:
            fields["forked_from"] = dumps(forked_from)
        deadline = deadline_ms(self.due_seconds)
        if idempotency_key is None:
            pipe = self.r.pipeline(transaction=False)  # one round trip on one server
            pipe.hset(self.keys.run(run_id), mapping=fields)
            self._index(pipe, run_id, now, batch_id, thread_id, tenant, schedule_id, parent)
            # Due from the moment it exists (its first message may be lost with a worker).
            pipe.zadd(self.keys.due, {run_member(run_id): deadline})
            pipe.execute()
            return run_id, True
        # With a key, the id comes from the key (``idempotent_id``): a creator killed before
        # its claim left this very record, which its retry finds here and claims; nothing
        # is due before the key is ours, and a record that exists is never rewritten. A
        # creator killed between its write and its index rows left a run the listing (and a
        # resumed batch's count) would miss: its retry adds the rows that are missing.
        def index(pipe: Any, wrote: bool) -> None:
            self._index(pipe, run_id, now, batch_id, thread_id, tenant, schedule_id, parent,
                        missing_only=not wrote)

        def unindex(pipe: Any) -> None:
            for rows in (self.keys.runs, self.keys.runs_status("queued"), self.keys.runs_tenant(tenant)):
                pipe.zrem(rows, run_id)

        return create_once(self.r, run_id, fields, claim_key=self.keys.idem(idempotency_key, tenant),
                           claim_ttl=self._index_ttl, record_key=self.keys.run, due_key=self.keys.due,
                           member=run_member, deadline_ms=deadline,
                           index=index, unindex=unindex)

    def _index(self, pipe: Any, run_id: str, now: float, batch_id: str | None, thread_id: str,
               tenant: str, schedule_id: str | None = None, parent: str | None = None, *,
               missing_only: bool = False) -> None:
        """The run's rows in the run index (``reactq.shared.stores.runs_index``); a thread's
        row under the tenant's name for it (``tenancy.thread_key``). ``missing_only``: the run
        existed already (a retry): add only rows that are not there, never its status row."""
        statuses = [] if missing_only else [self.keys.runs_status("queued")]
        for index in (self.keys.runs, *statuses, self.keys.runs_tenant(tenant)):
            pipe.zadd(index, {run_id: now}, nx=missing_only)
            pipe.zremrangebyscore(index, "-inf", now - self._index_ttl)
        for index in ([self.keys.runs_batch(batch_id)] if batch_id else []) + \
                     ([self.keys.runs_thread(thread_key(tenant, thread_id))] if thread_id else []) + \
                     ([self.keys.runs_schedule(owned_name(tenant, schedule_id))] if schedule_id else []) + \
                     ([self.keys.runs_forked_from(parent)] if parent else []):
            pipe.zadd(index, {run_id: now}, nx=missing_only)
            pipe.expire(index, self._index_ttl)

    def load(self, run_id: str) -> RunRecord:
        return record_of(run_id, {text(k): v for k, v in self.r.hgetall(self.keys.run(run_id)).items()})

    def load_step(self, run_id: str) -> Read[RunRecord]:
        """What a step needs, in one script call (``RunRecord`` with ``interrupts`` and
        ``ledger``): run it, or queue it into another round trip (the lease's)."""
        keys = [self.keys.run(run_id), self.keys.run_interrupts(run_id), self.keys.run_tools(run_id)]

        def parse(replies: list[Any]) -> RunRecord:
            flat, entries, ids, recs = replies[0]
            rec = record_of(run_id, {text(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)})
            rec.interrupts = interrupts_of(entries)
            rec.ledger = {text(i): json.loads(r) for i, r in zip(ids, recs, strict=True) if r}
            return rec

        return Read([Op.call(self._load, keys, [])], parse)

    def after_llm(self, run_id: str, cursor: str | None, *,
                  then: list[Op] | None = None) -> tuple[list[Interrupt], bool]:
        """The read a step makes once its LLM call returned: the interrupts after ``cursor``
        and the cancel flag, in one round trip with ``then`` (deferred writes)."""
        keys = [self.keys.run(run_id), self.keys.run_interrupts(run_id)]
        replies = execute(self.r, [*(then or []), Op.call(self._after_llm, keys, [cursor or ""])])
        failed(replies[:-1])
        entries, cancel = checked(replies[-1])
        return interrupts_of(entries), text(cancel) == "1"

    def fields_of(self, run_ids: list[str], *names: str) -> list[list[str | None]]:
        """``names`` of each run's record, in one round trip (None: no such field or run)."""
        if not run_ids:
            return []
        pipe = self.r.pipeline(transaction=False)
        for rid in run_ids:
            pipe.hmget(self.keys.run(rid), *names)
        return [[None if v is None else text(v) for v in row] for row in pipe.execute()]

    def count_crash(self, run_id: str, step_no: int, died: bool, call_id: str | None = None) -> int:
        """Count one resend of the run's step ``step_no`` (of its tool call ``call_id``), a
        crash if ``died``; the crashes of that step so far (``reactq.shared.stores.crashes``)."""
        field = f"{CRASH_FIELD}:{call_id}" if call_id else CRASH_FIELD
        return count_crash(self.r, self.keys.run(run_id), field, step_no, died)

    def activity(self, newest: int) -> list[RunActivity]:
        """The ``newest`` runs of the index as ``RunActivity``, in one round trip after the
        index's (None: no such field or run)."""
        ids = [text(i) for i in self.r.zrevrange(self.keys.runs, 0, newest - 1)]
        pipe = self.r.pipeline(transaction=False)
        for rid in ids:
            pipe.hmget(self.keys.run(rid), "status", "updated_at")
            pipe.exists(self.keys.lease(run_member(rid)))
        rows = pipe.execute() if ids else []
        return [RunActivity(rid, None if status is None else text(status), float(updated) if updated else None,
                            bool(held))
                for rid, (status, updated), held in zip(ids, rows[0::2], rows[1::2], strict=True)]

    def claim_resume(self, run_id: str, seconds: int) -> bool:
        """True for the first caller in ``seconds`` (one stall resend for the whole fleet)."""
        return bool(self.r.set(self.keys.stall(run_id), "1", nx=True, ex=seconds))

    def exists(self, run_id: str) -> bool:
        return bool(self.r.exists(self.keys.run(run_id)))

    def status(self, run_id: str) -> dict[str, Any]:
        """The public view: status, timestamps, result when finished."""
        fields = self.r.hmget(self.keys.run(run_id), "status", "created_at", "updated_at", "result", "pub_seq",
                              "schedule_id", "scheduled_for", "tenant", "forked_from")
        if fields[0] is None:
            raise RunNotFound(f"no run with id {run_id!r} (it may have expired)")
        status, created, updated, result, pub, schedule_id, scheduled_for, tenant, forked = (
            None if v is None else text(v) for v in fields)
        out = {"run_id": run_id, "status": status, "tenant": owner_of(tenant), "created_at": float(created or 0),
               "updated_at": float(updated or 0), "events": int(pub or 0),
               "result": json.loads(result) if result else None}
        if schedule_id:  # a schedule's run says so (a tick's also which tick)
            out.update(schedule_id=schedule_id, scheduled_for=scheduled_for)
        if forked:  # a fork says of which run, from which turn
            out["forked_from"] = json.loads(forked)
        return out

    def commit(self, run_id: str, state: RunState, expected_step_no: int, events: list[Event], *,
               turn_began: float | None = None, ops: list[Op] | None = None,
               then: list[Op] | None = None, pushes: list[tuple[str, str]] | None = None) -> bool:
        """Save ``state`` (step_no + 1) and publish ``events`` atomically; False if stale.

        ``ops`` (hash writes: the step's metrics) are applied only when the commit wins, in
        its script on one server, right after it on a cluster. ``then`` goes out in the same
        round trip after the commit whatever its outcome (the lease hand-off, deferred
        writes); on a cluster it follows in a round trip of its own. ``pushes`` (list key,
        payload: the broker's messages of what comes next, on one server whose Redis is also
        the broker) are ``LPUSH``ed by the commit's script when it wins, never otherwise."""
        if pushes and self._cluster:
            raise ValueError("a commit on a Redis Cluster cannot carry broker messages")
        state.step_no = expected_step_no + 1
        nxt = next_step(state)
        done = nxt.result if isinstance(nxt, Done) else None
        result = dumps(done.as_dict()) if done is not None else ""
        status = done.status if done is not None else "running"
        turn = dumps(turn_summary(state)) if isinstance(nxt, RunTools) else ""
        args: list[Any] = [expected_step_no, dump_state(state), state.step_no, status, result,
                           f"{time.time():.6f}", self.ttl if done is not None else 0, self.maxlen, turn,
                           f"{turn_began:.6f}" if turn and turn_began else "",
                           state.interrupt_cursor or "", "0" if self._cluster else "1"]
        due = _due_args(run_id, nxt, self.due_seconds)
        keys = self.keys.run_keys(run_id)
        op_keys, op_args = inline_ops([] if self._cluster else ops or [])
        if not self._cluster:
            keys += [self.keys.due, *op_keys]
        push_args: list[Any] = [len(pushes or [])]
        for list_key, payload in pushes or []:
            keys.append(list_key)
            push_args += [len(keys), payload]
        args += due + op_args + push_args + triples(events)
        if self._cluster:
            out = self._commit(keys=keys, args=args)
        else:
            replies = execute(self.r, [Op.call(self._commit, keys, args), *(then or [])])
            failed(replies[1:])
            out = checked(replies[0])
        if isinstance(out, list) and self._cluster:
            self._write_due(due)
            failed(execute(self.r, ops or []))
        if self._cluster and then:
            failed(execute(self.r, then))
        if not isinstance(out, list):
            return False
        if text(out[1]) != status:
            self._index_status(run_id, status, float(text(out[2]) or 0))
        return True

    def _write_due(self, due: list[Any]) -> None:
        """The commit's due entries, on a Redis Cluster (another slot than the run's)."""
        n, member, pairs = int(due[0]), due[1], due[2:]
        if n == 0:
            self.r.zrem(self.keys.due, member)
        else:
            self.r.zadd(self.keys.due, {pairs[i + 1]: pairs[i] for i in range(0, len(pairs), 2)})

    def move_status(self, run_id: str, status: str, created_at: float | None = None) -> None:
        """Move the run to ``status``'s index set after a script changed its status (approvals)."""
        if created_at is None:
            created_at = float(text(self.r.hget(self.keys.run(run_id), "created_at") or b"0"))
        self._index_status(run_id, status, created_at)

    def _index_status(self, run_id: str, status: str, created_at: float) -> None:
        """Move the run to its new status set (after the commit: other slots). A crash in
        between leaves a stale row, which the listing corrects against the run hash."""
        pipe = self.r.pipeline(transaction=False)
        for other in RUN_STATUSES:
            if other == status:
                pipe.zadd(self.keys.runs_status(other), {run_id: created_at})
                if other != "waiting":  # a run may wait for a person longer than the index's TTL
                    pipe.zremrangebyscore(self.keys.runs_status(other), "-inf", time.time() - self._index_ttl)
            else:
                pipe.zrem(self.keys.runs_status(other), run_id)
        pipe.execute()

    def publish(self, run_id: str, events: list[Event]) -> int:
        """Publish events now, skipping any seq already published. Returns ``pub_seq``."""
        if not events:
            return -1
        keys = [self.keys.run(run_id), self.keys.run_events(run_id)]
        return int(self._publish(keys=keys, args=[self.maxlen, *triples(events)]))

    # -- interrupts and cancellation --------------------------------------------------
    def add_interrupt(self, run_id: str, content: str, *, limit: int = 100) -> str:
        """Append a follow-up; ``TooManyRequests`` once the run holds ``limit`` of them."""
        from reactq.shared.stores.capped import capped_xadd

        msg_id = secrets.token_hex(6)
        capped_xadd(self.r, self.keys.run_interrupts(run_id), {"content": content, "id": msg_id},
                    limit, "interrupts")
        return msg_id

    def interrupts_after(self, run_id: str, cursor: str | None) -> list[Interrupt]:
        return interrupts_of(entries_after(self.r, self.keys.run_interrupts(run_id), cursor))

    def request_cancel(self, run_id: str) -> None:
        self.r.hset(self.keys.run(run_id), "cancel", "1")

    def cancel_requested(self, run_id: str) -> bool:
        return text(self.r.hget(self.keys.run(run_id), "cancel") or b"0") == "1"

    # -- events -----------------------------------------------------------------------
    def read_events(self, run_id: str, after: str | None = None, *, block_ms: int | None = None,
                    count: int = 500) -> list[tuple[str, Event]]:
        """Events after stream id ``after`` (None = from the start), optionally blocking."""
        return read_events(self.r, self.keys.run_events(run_id), after, block_ms=block_ms, count=count)

    # -- tool ledger ------------------------------------------------------------------
    def ledger_get(self, run_id: str, call_id: str) -> dict[str, Any] | None:
        raw = self.r.hget(self.keys.run_tools(run_id), call_id)
        return json.loads(raw) if raw else None

    def ledger_claim(self, run_id: str, call_id: str, token: str, step_no: int) -> bool:
        """Mark a call pending; False when a record already exists."""
        rec = dumps({"status": "pending", "token": token, "step_no": step_no, "at": time.time()})
        return bool(self.r.hsetnx(self.keys.run_tools(run_id), call_id, rec))

    def ledger_done(self, run_id: str, call_id: str, outcome: ToolOutcome, step_no: int) -> bool:
        """Record the call's outcome; False (nothing written) when it is already done."""
        rec = {"status": "done", "step_no": step_no, "outcome": outcome.model_dump(mode="json")}
        return bool(self._ledger_done(keys=[self.keys.run_tools(run_id)], args=[call_id, dumps(rec)]))

    def ledger_outcomes(self, run_id: str, call_ids: list[str]) -> dict[str, ToolOutcome]:
        """Recorded outcomes of ``call_ids`` (only those done)."""
        if not call_ids:
            return {}
        raws = self.r.hmget(self.keys.run_tools(run_id), call_ids)
        return outcomes_of({c: json.loads(r) for c, r in zip(call_ids, raws, strict=True) if r}, call_ids)

    def fanin(self, run_id: str, step_no: int, call_id: str, calls: int) -> int:
        """Count ``call_id`` in; returns how many of the turn's ``calls`` are in. The call
        stops being due and, once all are in, the run's next step is (same script); a run whose
        other calls wait for a person is left ``waiting`` once this was the last one out."""
        keys = [self.keys.run_fanin(run_id, step_no), self.keys.run(run_id)]
        deadline = deadline_ms(self.due_seconds)
        count, ready, waiting = self._fanin(keys=keys + ([] if self._cluster else [self.keys.due]),
                                            args=[call_id, max(self.ttl, 3600), tool_member(run_id, call_id),
                                                  run_member(run_id), calls, deadline, step_no])
        if int(waiting):
            self.move_status(run_id, "waiting")
        if self._cluster:
            pipe = self.r.pipeline(transaction=False)
            pipe.zrem(self.keys.due, tool_member(run_id, call_id))
            if int(ready):
                pipe.zadd(self.keys.due, {run_member(run_id): deadline})
            pipe.execute()
        return int(count)

    def get_turn(self, run_id: str) -> dict[str, Any] | None:
        """The pending tool turn (what a tool task needs, without the whole history)."""
        raw = self.r.hget(self.keys.run(run_id), "turn")
        return json.loads(raw) if raw else None


def _due_args(run_id: str, nxt: Next, bound: float) -> list[Any]:
    """``n, run member, (deadline, member) * n`` for the commit (see ``shared/stores/due.py``)."""
    member = run_member(run_id)
    due = deadline_ms(bound)
    match nxt:
        case Done():
            return [0, member]
        case RunTools(calls=calls):
            # The run's own member is parked while its tools are out (the fan-in brings it back).
            pairs: list[Any] = [now_ms() + PARKED_MS, member]
            for call in calls:
                pairs += [due, tool_member(run_id, call.id)]
            return [len(pairs) // 2, member, *pairs]
        case SelectTools() | CallLLM() | Answer():
            return [1, member, due, member]
        case _:
            assert_never(nxt)
