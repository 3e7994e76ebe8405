"""Every Redis key reactq uses, in one place. The prefix (``reactq:``) is ``REACTQ_KEY_PREFIX``.

Braces are literal: they are Redis Cluster hash tags (only the part between the first ``{``
and the next ``}`` picks the slot), so every key of one run, DAG or batch lands in the slot of
its id and the run's Lua scripts touch one slot, on one shard.

| key                               | type   | written by            | TTL                         |
|-----------------------------------|--------|-----------------------|-----------------------------|
| ``run:{id}``                      | hash   | dispatcher, workers   | ``run_ttl`` after it ends   |
|   fields: status, request, result, created_at, updated_at (contract); state, step_no,
|   pub_seq (last published event seq), turn (the pending tool turn), turn_began (when its
|   LLM call began), icursor (the committed interrupt cursor), cancel, error
| ``run:{id}:events``               | stream | workers (Lua, by seq) | with the run; ``MAXLEN ~``  |
| ``run:{id}:interrupts``           | stream | dispatcher            | with the run                |
| ``run:{id}:tools``                | hash   | tool tasks (ledger)   | with the run                |
|   field tool_call_id → JSON {status: pending|done, token, outcome}
|   field approval:<approval_id> → JSON approval record (``shared/stores/approvals.py``)
| ``run:{id}:fanin:{step}``         | set    | tool tasks            | with the run; none while a call waits |
| ``idem:{key}``                    | string | dispatcher (SET NX)   | with the run                |
|   a tenant other than ``default``: ``idem@<tenant>:{key}``
| ``runs:tenant:{tenant}``          | zset   | dispatcher            | like ``runs``               |
| ``mcp:tasks:{tenant}``            | zset   | MCP server            | ``run_ttl``, refreshed at each task |
|   the runs a tenant made as MCP tasks, by created_at (``tasks/list``); expired runs are dropped when listed
| ``apikey:{sha256}``               | hash   | keys store            | none (deleted on revoke)    |
| ``apikeys``                       | hash   | keys store            | none (key id → public JSON) |
| ``tenant:{t}:spend:{day}``        | hash   | LLM middleware        | 2 days (dollars, reservations) |
| ``tenant:{t}:active``             | zset   | dispatcher, workers   | none (active run ids)       |
| ``runs``                          | zset   | dispatcher            | none (run ids by created_at)|
| ``runs:status:{status}``          | zset   | create/commit scripts | none; pruned like ``runs``  |
| ``runs:batch:{id}``, ``runs:thread:{tid}``, ``runs:schedule:{name}`` | zset | create | refreshed at each create |
|   the run index behind ``GET /v1/runs`` (``shared/stores/runs_index.py``); members whose run hash
|   expired are dropped by the listing that meets them
| ``stall:<run_id>``                | string | workers (SET NX EX)   | the stall window (the sweeper's one resend) |
| ``lease:{lease-N}:leases``        | zset   | workers               | none (member → expiry ms)   |
| ``lease:{lease-N}:tasks``         | hash   | workers               | none (member → task spec)   |
| ``lease:{lease-N}:held:{member}`` | string | workers (SET NX PX)   | the lease TTL               |
|   N = crc32(member) mod ``LEASE_SHARDS``: one shard's three keys share a slot
| ``due``                           | zset   | run/DAG commits (Lua) | none (member → deadline ms) |
|   members ``run:{id}``, ``tool:{id}:{call}``, ``dag:{id}``, ``approval:{id}:{call}`` (an
|   approval's expiry): work committed and not yet
|   finished; watchdogs resend what is past its deadline and holds no lease (workers/recovery/watchdog.py).
|   A cross-run structure (one per deployment), like ``runs``: not hash-tagged.
|   Resend counts live in the owner's hash: ``run:{id}`` fields ``due_n``, ``due_n:{call}``;
|   ``dag:{id}`` field ``due_n``.
| ``approvals:pending``             | zset   | approval scripts      | none (``run/approval`` → requested_at) |
| ``catalog``                       | hash   | workers at start      | none (tools, models)        |
| ``toolsets``                      | hash   | workers (heartbeat)   | none (node → JSON {tools, queue, at}) |
|   each live worker's tools and its own hand-on queue (``shared/stores/toolsets.py``)
| ``tools:offered``                 | hash   | workers at start      | none (tool name → its schema, every tool a worker offered) |
| ``run:{id}:toolwait``             | hash   | workers (tool task)   | the wait + a minute (call id → JSON {since, last}) |
| ``dag:{id}`` / ``dag:{id}:events`` / ``dag:{id}:interrupts`` | hash / stream | DAG tasks | as for runs |
| ``batch:{id}`` / ``batch:{id}:driver`` | hash / string | the gateway          | ``run_ttl`` after it ends   |
| ``batch:{id}:spend``              | hash   | LLM middleware        | ``run_ttl`` after its last call |
|   a batch with ``cost_budget_usd``: spent, held, r:<run id> (``shared/stores/spend.py``)
| ``eval:{id}`` / ``eval:{id}:cases`` | hash / hash | the eval's driver  | ``REACTQ_EVAL_TTL_S`` (30 days) |
|   an eval's definition and summary (``shared/stores/evals.py``); its cases' scores by case id
| ``dags``, ``batches``, ``evals``  | zset   | dispatcher, gateway   | none (ids by created_at)    |
|   the indexes behind ``GET /v1/dags`` and ``GET /v1/batches`` (``shared/stores/listing.py``),
|   written before the object; members whose hash expired are dropped by the listing
| ``metrics:<family>:<N>``          | hash   | workers               | none (N < ``METRICS_SHARDS``)|
| ``webhook:{webhook_id}``          | hash   | workers (deliveries)  | ``run_ttl`` once final      |
|   fields: webhook_id, type, url, owner_kind, owner_id, body, status, attempts,
|   last_status_code, last_error, next_attempt_at, created_at, updated_at; due member
|   ``webhook:<webhook_id>`` while it is pending (``shared/stores/webhooks.py``)
| ``run:{id}:webhooks`` (``dag:``, ``batch:``) | zset | workers, gateway | ``run_ttl``     |
|   the owner's deliveries: webhook_id → created_at
| ``thread:{tid}``                  | hash   | dispatcher, workers   | ``run_ttl`` once idle       |
|   fields: active (run id), stop:<run id> (interrupt|rollback), updated_at
| ``thread:{tid}:runs``             | list   | dispatcher            | with the thread (JSON {run_id, query, created_at}) |
| ``thread:{tid}:queue``            | list   | dispatcher, workers   | with the thread (enqueued run ids, FIFO) |
| ``thread:{tid}:history``          | list   | workers (release)     | with the thread (JSON {run_id, messages}) |
| ``flow:{model}``                  | hash   | limiter (Lua)         | none (rtat, ttat, pause, …) |
| ``schedule:{name}``               | hash   | dispatcher, scheduler | none (until deleted)        |
|   name: the schedule id for tenant ``default``, ``tenant/id`` for any other (``tenancy.owned_name``)
|   fields: spec (JSON), tenant, next_tick (epoch s; empty while paused), last_fired_at, last_run_id,
|   skipped, fired, last_error, created_at, updated_at (``shared/stores/schedules.py``)
| ``schedules``                     | zset   | dispatcher            | none (schedule name → created_at) |
| ``schedules:due``                 | zset   | dispatcher, scheduler | none (schedule name → next tick); a hint, the hash decides |
| ``redbeat:*``                     | various| the scheduler (celery-redbeat) | its lock: ``redbeat::lock`` |
| ``flow:{model}:inflight``         | zset   | limiter               | none (call id → lease end)  |
| ``flow:{model}:line:{priority}``  | zset   | limiter               | none (waiter → arrival ms)  |
| ``flow:{model}:window``           | zset   | limiter               | 120 s (settled calls, 60 s) |
The ``flow:*`` keys are per model (shared by every run); the model name is wrapped in

The rule every new key follows (so that ``REACTQ_REDIS_CLUSTER=true`` keeps working):

1. A key that belongs to one run, DAG or batch is built here from its id, with the id in
   braces right after the kind: ``run:{id}:<what>``, ``dag:{id}:<what>``, ``batch:{id}:<what>``.
   Ids never contain ``{`` or ``}``.
2. A Lua script's KEYS all share one hash tag: the keys of ONE run (or DAG, batch, lease
   shard). A script never names a cross-run key (``runs``, ``catalog``, ``metrics:*``, an
   index, a due set, a limiter) together with a run's key: split it into per-slot calls,
   ordered so that a crash in between leaves nothing pointing at nothing, or pipelined
   (``pipeline(transaction=False)`` is fine across slots; ``MULTI``/``WATCH`` is not).
3. A cross-run structure that every step writes (a hot key) is sharded into N keys with
   their own tags (``{lease-3}``) so that the load spreads over the cluster; readers walk
   the N shards.
4. Multi-key commands (``MGET``, ``XREAD`` of several streams, ``SUNION``…) only within
   one tag; ``SCAN`` patterns treat braces literally.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

LEASE_SHARDS = 16
#: Metric hashes are written to one of these shards (by worker for counters, by run id for the
#: per-run gauges) so that no single hash takes every increment; the reader sums them.
METRICS_SHARDS = 8


@dataclass(frozen=True)
class Keys:
    prefix: str = "reactq:"

    # -- one run: every key carries {run_id} -------------------------------------------
    def run(self, run_id: str) -> str:
        return f"{self.prefix}run:{{{run_id}}}"

    def run_events(self, run_id: str) -> str:
        return f"{self.run(run_id)}:events"

    def run_interrupts(self, run_id: str) -> str:
        return f"{self.run(run_id)}:interrupts"

    def run_tools(self, run_id: str) -> str:
        return f"{self.run(run_id)}:tools"

    def run_toolwait(self, run_id: str) -> str:
        """The run's tool calls that wait for a worker offering their tool."""
        return f"{self.run(run_id)}:toolwait"

    def run_fanin(self, run_id: str, step_no: int) -> str:
        return f"{self.run(run_id)}:fanin:{step_no}"

    def run_keys(self, run_id: str) -> list[str]:
        """Every key of one run (for TTLs and clean-up); all in the run's slot."""
        return [self.run(run_id), self.run_events(run_id), self.run_interrupts(run_id),
                self.run_tools(run_id)]

    # -- cross-run --------------------------------------------------------------------
    def idem(self, key: str, tenant: str = "default") -> str:
        """An idempotency key; a tenant other than ``default`` has its own names."""
        scope = "" if tenant == "default" else f"@{tenant}"
        return f"{self.prefix}idem{scope}:{{{key}}}"

    def mcp_tasks(self, tenant: str) -> str:
        """The runs one tenant made as MCP tasks, by creation time (``tasks/list``)."""
        return f"{self.prefix}mcp:tasks:{{{tenant}}}"

    def runs_tenant(self, tenant: str) -> str:
        """The run index of one tenant (``GET /v1/runs`` for a tenant's key)."""
        return f"{self.prefix}runs:tenant:{tenant}"

    def api_key(self, digest: str) -> str:
        """An API key's record, by the SHA-256 of its secret (the secret is never stored)."""
        return f"{self.prefix}apikey:{{{digest}}}"

    @property
    def api_keys(self) -> str:
        """Every API key's public record by key id (hash: key_id → JSON)."""
        return f"{self.prefix}apikeys"

    def tenant_spend(self, tenant: str, day: str) -> str:
        """A tenant's dollars spent on one UTC day (hash: spent, reserved:<call>)."""
        return f"{self.prefix}tenant:{{{tenant}}}:spend:{day}"

    def tenant_active(self, tenant: str) -> str:
        """A tenant's active runs (zset: run id → created_at), for ``max_active_runs``."""
        return f"{self.prefix}tenant:{{{tenant}}}:active"

    def stall(self, run_id: str) -> str:
        """Set (with a TTL) by the stall sweeper that resent the run: one resend per window
        for the whole fleet (workers/recovery/sweeper.py)."""
        return f"{self.prefix}stall:{run_id}"

    @property
    def runs(self) -> str:
        return f"{self.prefix}runs"

    def runs_status(self, status: str) -> str:
        return f"{self.prefix}runs:status:{status}"

    def runs_batch(self, batch_id: str) -> str:
        return f"{self.prefix}runs:batch:{batch_id}"

    @property
    def due(self) -> str:
        """Work committed and not finished (zset: member → deadline ms), see workers/recovery/watchdog.py.
        A cross-run key: written beside a run's scripts on a Redis Cluster (shared/stores/runs.py)."""
        return f"{self.prefix}due"

    @property
    def approvals_pending(self) -> str:
        """The operators' inbox: pending approvals of every run (zset: ``run_id/approval_id``
        → requested_at, s). Cross-run, like ``due``: written beside the run's scripts."""
        return f"{self.prefix}approvals:pending"

    def runs_thread(self, thread_id: str) -> str:
        return f"{self.prefix}runs:thread:{thread_id}"

    def runs_schedule(self, schedule_id: str) -> str:
        return f"{self.prefix}runs:schedule:{schedule_id}"

    def runs_forked_from(self, run_id: str) -> str:
        """The forks of a run (``GET /v1/runs?forked_from=``)."""
        return f"{self.prefix}runs:forked_from:{run_id}"

    # -- schedules ----------------------------------------------------------------------
    def schedule(self, schedule_id: str) -> str:
        return f"{self.prefix}schedule:{{{schedule_id}}}"

    @property
    def schedules(self) -> str:
        return f"{self.prefix}schedules"

    @property
    def schedules_due(self) -> str:
        return f"{self.prefix}schedules:due"

    @property
    def redbeat_prefix(self) -> str:
        """celery-redbeat's keys (its lock, its own schedule) start with this."""
        return f"{self.prefix}redbeat:"

    @property
    def catalog(self) -> str:
        return f"{self.prefix}catalog"

    @property
    def toolsets(self) -> str:
        """Each live worker's tools (``shared/stores/toolsets.py``)."""
        return f"{self.prefix}toolsets"

    @property
    def tools_offered(self) -> str:
        """Every tool name some worker has offered (a name not in it was made up)."""
        return f"{self.prefix}tools:offered"

    def metrics(self, name: str, shard: int | None = None) -> str:
        """``metrics:<family>`` (written before the shards existed; still read), or a shard of it."""
        base = f"{self.prefix}metrics:{name}"
        return base if shard is None else f"{base}:{shard}"

    def metrics_all(self, name: str) -> list[str]:
        """Every key a reader sums for one family: the unsharded one and each shard."""
        return [self.metrics(name), *(self.metrics(name, n) for n in range(METRICS_SHARDS))]

    @staticmethod
    def metrics_shard(owner: str) -> int:
        return zlib.crc32(owner.encode()) % METRICS_SHARDS

    # -- leases: sharded, each shard's keys in one slot -------------------------------
    @staticmethod
    def lease_shard(member: str) -> int:
        return zlib.crc32(member.encode()) % LEASE_SHARDS

    def _lease_base(self, shard: int) -> str:
        return f"{self.prefix}lease:{{lease-{shard}}}"

    def lease(self, member: str) -> str:
        """The key a holder sets (``SET NX PX``) while it runs ``member``."""
        return self.lease_held_prefix(self.lease_shard(member)) + member

    def lease_held_prefix(self, shard: int) -> str:
        return f"{self._lease_base(shard)}:held:"

    def lease_tasks_of(self, shard: int) -> str:
        """The shard's hash: member → the task spec to resend."""
        return f"{self._lease_base(shard)}:tasks"

    def lease_tasks_for(self, member: str) -> str:
        return self.lease_tasks_of(self.lease_shard(member))

    # -- one DAG, one batch ------------------------------------------------------------
    def dag(self, dag_id: str) -> str:
        return f"{self.prefix}dag:{{{dag_id}}}"

    def dag_events(self, dag_id: str) -> str:
        return f"{self.dag(dag_id)}:events"

    def dag_interrupts(self, dag_id: str) -> str:
        return f"{self.dag(dag_id)}:interrupts"

    def batch(self, batch_id: str) -> str:
        return f"{self.prefix}batch:{{{batch_id}}}"

    @property
    def dags_index(self) -> str:
        """DAG ids by created_at (``GET /v1/dags``)."""
        return f"{self.prefix}dags"

    @property
    def batches_index(self) -> str:
        """HTTP batch ids by created_at (``GET /v1/batches``)."""
        return f"{self.prefix}batches"

    def batch_driver(self, batch_id: str) -> str:
        return f"{self.batch(batch_id)}:driver"

    # -- evals ---------------------------------------------------------------------------
    def eval(self, eval_id: str) -> str:
        return f"{self.prefix}eval:{{{eval_id}}}"

    def eval_cases(self, eval_id: str) -> str:
        """An eval's scored cases (hash: case id → JSON record)."""
        return f"{self.eval(eval_id)}:cases"

    @property
    def evals_index(self) -> str:
        """Eval ids by created_at (``GET /v1/evals``)."""
        return f"{self.prefix}evals"

    def batch_spend(self, batch_id: str) -> str:
        """A batch's dollars under its ``cost_budget_usd`` (hash: spent, held, r:<run>)."""
        return f"{self.batch(batch_id)}:spend"

    def batch_id_of(self, key: str) -> str | None:
        """The id of a ``batch:{id}`` hash key (None for any other key, e.g. ``:driver``)."""
        head = f"{self.prefix}batch:{{"
        if key.startswith(head) and key.endswith("}"):
            inner = key[len(head):-1]
            return inner if "}" not in inner and "{" not in inner else None
        return None

    # -- webhooks -----------------------------------------------------------------------
    def webhook(self, webhook_id: str) -> str:
        return f"{self.prefix}webhook:{{{webhook_id}}}"

    def owner_webhooks(self, kind: str, owner_id: str) -> str:
        """The deliveries of one run, DAG or batch (in the owner's slot)."""
        return f"{self.prefix}{kind}:{{{owner_id}}}:webhooks"

    def thread(self, thread_id: str) -> str:
        return f"{self.prefix}thread:{{{thread_id}}}"

    def thread_runs(self, thread_id: str) -> str:
        return f"{self.prefix}thread:{{{thread_id}}}:runs"

    def thread_queue(self, thread_id: str) -> str:
        return f"{self.prefix}thread:{{{thread_id}}}:queue"

    def thread_history(self, thread_id: str) -> str:
        return f"{self.prefix}thread:{{{thread_id}}}:history"

    def thread_keys(self, thread_id: str) -> list[str]:
        """Every key of one thread, in the order the thread scripts take them."""
        return [self.thread(thread_id), self.thread_runs(thread_id), self.thread_queue(thread_id),
                self.thread_history(thread_id)]

    def flow(self, model: str) -> str:
        return f"{self.prefix}flow:{{{model}}}"

    def flow_inflight(self, model: str) -> str:
        return f"{self.prefix}flow:{{{model}}}:inflight"

    def flow_line(self, model: str, priority: str) -> str:
        return f"{self.prefix}flow:{{{model}}}:line:{priority}"

    def flow_window(self, model: str) -> str:
        return f"{self.prefix}flow:{{{model}}}:window"

