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
| ``leases``                        | zset   | workers               | none (member → expiry ms)   |
| ``lease:{member}``                | string | workers (SET NX PX)   | the lease TTL               |
| ``lease:tasks``                   | hash   | workers               | none (member → task spec)   |
| ``catalog``                       | hash   | workers at start      | none (tools, models)        |
| ``dag:{id}`` / ``dag:{id}:events``| hash / stream | DAG tasks      | as for runs                 |
| ``metrics:*``                     | hash   | workers               | none                        |
| ``flow:{model}``                  | hash   | limiter (Lua)         | none (rtat, ttat, pause, …) |
| ``flow:{model}:inflight``         | zset   | limiter               | none (call id → lease end)  |
| ``flow:{model}:line:{priority}``  | zset   | limiter               | none (waiter → arrival ms)  |
| ``flow:{model}:window``           | zset   | limiter               | 120 s (settled calls, 60 s) |
| run hash field ``tokens_spent``   | int    | LLM middleware        | with the run                |
| batch hash fields ``token_budget``, ``cancel`` | | gateway / CLI   | with the batch              |

The ``flow:*`` keys are per model (shared by every run); the model name is wrapped in
literal braces, a Redis Cluster hash tag, so one script touches one slot.
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
        return f"{self.prefix}leases"

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

    def flow(self, model: str) -> str:
        return f"{self.prefix}flow:{{{model}}}"

    def flow_inflight(self, model: str) -> str:
        return f"{self.prefix}flow:{{{model}}}:inflight"

    def flow_line(self, model: str, priority: str) -> str:
        return f"{self.prefix}flow:{{{model}}}:line:{priority}"

    def flow_window(self, model: str) -> str:
        return f"{self.prefix}flow:{{{model}}}:window"

    def run_keys(self, run_id: str) -> list[str]:
        """Every key of one run (for TTLs and clean-up)."""
        return [self.run(run_id), self.run_events(run_id), self.run_interrupts(run_id),
                self.run_tools(run_id)]
