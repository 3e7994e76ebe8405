"""The DAG store: ``reactq:dag:{id}`` (hash), its events stream and its interrupts stream.

Hash fields: ``status``, ``request``, ``result``, ``created_at``, ``updated_at`` (the
contract, as for runs), plus ``state`` (``DagState`` JSON), ``version`` (bumped by every
save), ``pub_seq`` (the last published event seq), ``phase``, ``round`` and ``cancel``.

All writes of state and events go through two Lua scripts. ``commit`` saves the state only
if ``version`` is still the one the caller loaded (compare-and-set) and publishes the
transition's events in the same script, so two workers can never both advance the same
version and state and events never disagree. Both scripts skip events whose seq is not
above ``pub_seq``: a redelivered task publishes nothing twice.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import redis

from reactq.shared.stores.due import dag_member, deadline_ms
from reactq.shared.redisconn import is_cluster
from reactq.shared.stores.streams import PUBLISH, PUBLISH_FN, entries_after, read_events, text, triples
from reactq.shared.errors import RunNotFound
from reactq.shared.events import Event, dumps
from reactq.shared.stores.idempotency import create_once
from reactq.shared.keys import Keys
from reactq.shared.stores.listing import dag_index
from reactq.shared.tenants.tenancy import DEFAULT_TENANT, owner_of

from reactq.shared.dag.machine import result_of
from reactq.shared.dag.state import DagState, dump_dag, load_dag

__all__ = ["DagNotFound", "DagRecord", "DagStore", "public_view"]


class DagNotFound(RunNotFound):
    """No DAG with that id (or it expired)."""


# KEYS: hash, events, interrupts, due set (single server only: on a Redis Cluster it is in
# another slot, and the caller writes the same entry right after). ARGV: expected version, state, status, result
# ('' = none), now, ttl (0 = keep), maxlen, phase, round, due deadline ms ('' = the DAG is
# over: remove it), DAG member, then event triples (see ``reactq.shared.stores.due``).
_COMMIT = PUBLISH_FN + """
local cur = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if cur ~= tonumber(ARGV[1]) then return -1 end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'version', cur + 1, 'status', ARGV[3],
           'updated_at', ARGV[5], 'phase', ARGV[8], 'round', ARGV[9])
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'result', ARGV[4]) end
if #KEYS >= 4 then
  if ARGV[10] == '' then redis.call('ZREM', KEYS[4], ARGV[11])
  else redis.call('ZADD', KEYS[4], ARGV[10], ARGV[11]) end
end
local last = publish(KEYS[1], KEYS[2], ARGV[7], 12)
local ttl = tonumber(ARGV[6])
if ttl > 0 then
  for k = 1, 3 do redis.call('EXPIRE', KEYS[k], ttl) end
end
return last
"""


@dataclass
class DagRecord:
    """A DAG as stored; ``state`` is None until its first task ran."""

    dag_id: str
    status: str
    version: int
    pub_seq: int
    state: DagState | None
    request: dict[str, Any]
    cancel: bool
    created_at: float
    updated_at: float
    result: dict[str, Any] | None
    tenant: str = DEFAULT_TENANT
    """Who owns the DAG (and its child runs)."""


class DagStore:
    """Synchronous access to DAGs (workers, dispatcher)."""

    def __init__(self, client: redis.Redis, *, keys: Keys | None = None,
                 ttl_seconds: int = 86400, maxlen: int = 10_000, due_seconds: float = 5.0) -> None:
        self.r = client
        self.keys = keys or Keys()
        self.ttl = ttl_seconds
        self.maxlen = maxlen
        self.due_seconds = due_seconds
        self._publish = client.register_script(PUBLISH)
        self._commit = client.register_script(_COMMIT)

    def create(self, dag_id: str, request: dict[str, Any], *,
               idempotency_key: str | None = None, tenant: str = DEFAULT_TENANT) -> tuple[str, bool]:
        """Store a new queued DAG. A key used before returns ``(existing_id, False)``.

        As for runs (``RunStore.create``): the DAG is written first and the key claimed last
        (``reactq.shared.stores.idempotency``), so the id a key names is always stored; with a key,
        pass ``idempotent_id(key, kind="dag")`` so that a retry finds what a killed creator
        wrote. A creator that loses the key to another id removes the DAG it wrote."""
        now = f"{time.time():.6f}"
        dag_index(self.r, self.keys, self.ttl).add(dag_id, float(now))  # before the DAG: see the index
        fields: dict[Any, str | int] = {
            "status": "queued", "request": dumps(request), "created_at": now, "updated_at": now,
            "version": 0, "pub_seq": 0, "phase": "planning", "round": 0, "tenant": tenant}
        deadline = deadline_ms(self.due_seconds)
        if idempotency_key is None:
            pipe = self.r.pipeline(transaction=False)  # two slots on a Redis Cluster
            pipe.hset(self.keys.dag(dag_id), mapping=fields)
            pipe.zadd(self.keys.due, {dag_member(dag_id): deadline})  # due from the moment it exists
            pipe.execute()
            return dag_id, True
        # With a key (its id ``idempotent_id(key, kind="dag")``), written only if absent and
        # due only once the key is ours, as for runs; a winner still queued is armed again.
        # Namespaced: a run and a DAG may carry the same key without meeting.
        return create_once(self.r, dag_id, fields, claim_key=self.keys.idem(f"dag:{idempotency_key}", tenant),
                           claim_ttl=self.ttl, record_key=self.keys.dag, due_key=self.keys.due,
                           member=dag_member, deadline_ms=deadline)

    def load(self, dag_id: str) -> DagRecord:
        raw = self.r.hgetall(self.keys.dag(dag_id))
        if not raw:
            raise DagNotFound(f"no DAG with id {dag_id!r} (it may have expired)")
        f = {text(k): v for k, v in raw.items()}
        return DagRecord(
            dag_id=dag_id, status=text(f.get("status", b"queued")),
            version=int(f.get("version", 0)), pub_seq=int(f.get("pub_seq", 0)),
            state=load_dag(f["state"]) if "state" in f else None,
            request=json.loads(f["request"]) if "request" in f else {},
            cancel=text(f.get("cancel", b"0")) == "1", created_at=float(f.get("created_at", 0)),
            updated_at=float(f.get("updated_at", 0)),
            result=json.loads(f["result"]) if "result" in f else None, tenant=owner_of(f.get("tenant")))

    def commit(self, state: DagState, expected_version: int, events: list[Event]) -> bool:
        """Save ``state`` and publish ``events`` if nobody saved since ``expected_version``."""
        state.version = expected_version + 1
        terminal = state.phase == "done"
        result = ""
        if terminal:
            result = dumps(result_of(state))
        args: list[Any] = [expected_version, dump_dag(state), state.status, result,
                           f"{time.time():.6f}", self.ttl if terminal else 0, self.maxlen,
                           state.phase, state.round, self._deadline(state), dag_member(state.dag_id)]
        args += triples(events)
        keys = [self.keys.dag(state.dag_id), self.keys.dag_events(state.dag_id),
                self.keys.dag_interrupts(state.dag_id)]
        cluster = is_cluster(self.r)
        ok = int(self._commit(keys=keys + ([] if cluster else [self.keys.due]), args=args)) >= 0
        if not ok:
            state.version = expected_version
        elif cluster:
            deadline, member = args[9], args[10]
            if deadline == "":
                self.r.zrem(self.keys.due, member)
            else:
                self.r.zadd(self.keys.due, {member: deadline})
        return ok

    def _deadline(self, state: DagState) -> int | str:
        """When the DAG's next driving message must have been taken up: while executing,
        after its next tick is due; '' once it is over."""
        if state.phase == "done":
            return ""
        return deadline_ms(self.due_seconds, after=state.tick_due or None)

    def publish(self, dag_id: str, events: list[Event]) -> int:
        """Publish now (live answer deltas), skipping seqs already published."""
        if not events:
            return -1
        keys = [self.keys.dag(dag_id), self.keys.dag_events(dag_id)]
        return int(self._publish(keys=keys, args=[self.maxlen, *triples(events)]))

    def request_cancel(self, dag_id: str) -> None:
        self.r.hset(self.keys.dag(dag_id), "cancel", "1")

    def cancel_requested(self, dag_id: str) -> bool:
        return text(self.r.hget(self.keys.dag(dag_id), "cancel") or b"0") == "1"

    def add_interrupt(self, dag_id: str, content: str, *, limit: int = 100) -> str:
        """Append a follow-up; ``TooManyRequests`` once the DAG holds ``limit`` of them."""
        from reactq.shared.stores.capped import capped_xadd

        return capped_xadd(self.r, self.keys.dag_interrupts(dag_id), {"content": content}, limit,
                           "interrupts")

    def interrupts_after(self, dag_id: str, cursor: str | None) -> list[tuple[str, str]]:
        """``(stream id, content)`` of follow-ups after ``cursor``."""
        entries = entries_after(self.r, self.keys.dag_interrupts(dag_id), cursor)
        return [(text(i), text(f.get(b"content", f.get("content", b"")))) for i, f in entries]

    def read_events(self, dag_id: str, after: str | None = None, *, block_ms: int | None = None,
                    count: int = 500) -> list[tuple[str, Event]]:
        """Events after stream id ``after`` (None = from the start), optionally blocking."""
        return read_events(self.r, self.keys.dag_events(dag_id), after, block_ms=block_ms, count=count)


def public_view(rec: DagRecord) -> dict[str, Any]:
    """``GET /v1/dags/{id}``: status, round, steps (status, run_id, result …), answer."""
    state = rec.state
    base: dict[str, Any] = {"dag_id": rec.dag_id, "status": rec.status,
                            "created_at": rec.created_at, "updated_at": rec.updated_at,
                            "events": rec.pub_seq, "goal": rec.request.get("goal")}
    if state is None:
        steps = [{**s, "status": "pending", "run_id": None, "result": None}
                 for s in rec.request.get("steps") or []]
        return {**base, "phase": "planning", "round": 0, "steps": steps, "answer": None, "output": None,
                "achieved": None, "confidence": None, "rounds": [], "result": None}
    analysis = state.analysis
    return {**base, "phase": state.phase, "round": state.round,
            "steps": [s.public() for s in state.steps],
            "answer": state.answer if state.phase == "done" else None,
            "output": state.output if state.phase == "done" else None,
            "achieved": analysis.achieved if analysis else None,
            "confidence": analysis.confidence if analysis else None,
            "followups": state.followups,
            "rounds": [{"round": r.round,
                        "analysis": r.analysis.model_dump() if r.analysis else None,
                        "steps": [s.public() for s in r.steps]} for r in state.history],
            "usage": state.usage.public(), "error": state.error, "result": rec.result}
