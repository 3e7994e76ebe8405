"""Every Redis key reactq uses, in one place. The prefix (``reactq:``) is ``REACTQ_KEY_PREFIX``.

| key                               | type   | written by            | TTL                         |
|-----------------------------------|--------|-----------------------|-----------------------------|
| ``run:{id}``                      | hash   | dispatcher, workers   | ``run_ttl`` after it ends   |
|   fields: status, request, result, created_at, updated_at (contract); state, step_no,
|   pub_seq (last published event seq), turn (the pending tool turn), cancel, error
| ``run:{id}:events``               | stream | workers (Lua, by seq) | with the run; ``MAXLEN ~``  |
| ``run:{id}:interrupts``           | stream | dispatcher            | with the run                |
| ``run:{id}:tools``                | hash   | tool tasks (ledger)   | with the run                |
|   field tool_call_id → JSON {status: pending|done, token, outcome}
| ``run:{id}:fanin:{step}``         | set    | tool tasks            | with the run                |
| ``idem:{key}``                    | string | dispatcher (SET NX)   | with the run                |
| ``runs``                          | zset   | dispatcher            | none (run ids by created_at)|
| ``due``                           | zset   | run/DAG commits (Lua) | none (member → deadline ms) |
|   members ``run:{id}``, ``tool:{id}:{call}``, ``dag:{id}``: work committed and not yet
|   finished; watchdogs resend what is past its deadline and holds no lease (workers/due.py).
|   A cross-run structure (one per deployment), like ``runs``: not hash-tagged.
|   Resend counts live in the owner's hash: ``run:{id}`` fields ``due_n``, ``due_n:{call}``;
|   ``dag:{id}`` field ``due_n``.
| ``lease:{member}``                | string | workers (SET NX PX)   | the lease TTL               |
| ``lease:tasks``                   | hash   | workers               | none (member → task spec of |
|   the holder; left behind by a holder that died, which is how a crash is counted)
| ``catalog``                       | hash   | workers at start      | none (tools, models)        |
| ``dag:{id}`` / ``dag:{id}:events``| hash / stream | DAG tasks      | as for runs                 |
| ``metrics:*``                     | hash   | workers               | none                        |
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Keys:
    prefix: str = "reactq:"

    def run(self, run_id: str) -> str:
        return f"{self.prefix}run:{run_id}"

    def run_events(self, run_id: str) -> str:
        return f"{self.prefix}run:{run_id}:events"

    def run_interrupts(self, run_id: str) -> str:
        return f"{self.prefix}run:{run_id}:interrupts"

    def run_tools(self, run_id: str) -> str:
        return f"{self.prefix}run:{run_id}:tools"

    def run_fanin(self, run_id: str, step_no: int) -> str:
        return f"{self.prefix}run:{run_id}:fanin:{step_no}"

    def idem(self, key: str) -> str:
        return f"{self.prefix}idem:{key}"

    @property
    def runs(self) -> str:
        return f"{self.prefix}runs"

    @property
    def leases(self) -> str:
        """No longer written (the ``due`` set replaced it); kept for tools that read it."""
        return f"{self.prefix}leases"

    @property
    def due(self) -> str:
        """Work committed and not finished (zset: member → deadline ms), see workers/due.py."""
        return f"{self.prefix}due"

    def lease(self, member: str) -> str:
        return f"{self.prefix}lease:{member}"

    @property
    def lease_tasks(self) -> str:
        return f"{self.prefix}lease:tasks"

    @property
    def catalog(self) -> str:
        return f"{self.prefix}catalog"

    def dag(self, dag_id: str) -> str:
        return f"{self.prefix}dag:{dag_id}"

    def dag_events(self, dag_id: str) -> str:
        return f"{self.prefix}dag:{dag_id}:events"

    def dag_interrupts(self, dag_id: str) -> str:
        return f"{self.prefix}dag:{dag_id}:interrupts"

    def batch(self, batch_id: str) -> str:
        return f"{self.prefix}batch:{batch_id}"

    def metrics(self, name: str) -> str:
        return f"{self.prefix}metrics:{name}"

    def run_keys(self, run_id: str) -> list[str]:
        """Every key of one run (for TTLs and clean-up)."""
        return [self.run(run_id), self.run_events(run_id), self.run_interrupts(run_id),
                self.run_tools(run_id)]
