"""What is due: the names of the durable "due" records and their deadlines.

Every piece of work that has been committed but not finished has a member in the ``due``
sorted set (``Keys.due``), scored by the time (ms) by which it must have been taken up.
The member is written by the same Lua script that commits the step that makes the work
due, so no crash can fall between "the step is saved" and "the next one is covered":

* ``run:{run_id}``: the run's next step (iterate / answer). Written by ``RunStore.create``
  and by every non-terminal commit; removed by the terminal commit. While a tool turn is
  out, its score is pushed far ahead and the tool calls carry the turn instead; the fan-in
  that counts the last tool in brings it back to ``now + bound``.
* ``tool:{run_id}:{call_id}``: one tool call of the turn in flight. Written by the commit
  that starts the turn; removed by the fan-in that counts the call in.
* ``approval:{run_id}:{call_id}``: a call that waits for a person, due at its approval's
  ``expires_at``; it replaces the call's and the run's members while the call waits.
  Written by the request, removed by the decision (``shared/stores/approvals.py``).
* ``dag:{dag_id}``: the DAG's next driving message. Written by ``DagStore.create`` and every
  non-terminal DAG commit (executing: after the next tick); removed by the terminal one.
* ``webhook:{webhook_id}``: a webhook message not yet delivered (or given up). Armed with
  the terminal write of the run, DAG or batch it reports; scored at the next attempt's time
  while a retry waits; removed once delivered or failed (``shared/stores/webhooks.py``).

Watchdogs (``reactq.workers.recovery.watchdog``) resend a member whose deadline passed and whose lease
is not held; a task that holds its lease pushes nothing, the watchdog just looks again
once that lease could have lapsed. The member names are the lease members, so "is it
running?" is one ``EXISTS``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

#: How far ahead the run's own member is pushed while its tool calls are out (the fan-in
#: brings it back); long enough never to fire before the last tool is counted in.
PARKED_MS = 7 * 24 * 3600 * 1000


def run_member(run_id: str) -> str:
    return f"run:{run_id}"


def tool_member(run_id: str, call_id: str) -> str:
    return f"tool:{run_id}:{call_id}"


def approval_member(run_id: str, call_id: str) -> str:
    """A call that waits for a person: due at its approval's expiry (``on_timeout``)."""
    return f"approval:{run_id}:{call_id}"


def dag_member(dag_id: str) -> str:
    return f"dag:{dag_id}"


@dataclass(frozen=True)
class Member:
    """A parsed due member: ``kind`` is run, tool, dag or webhook; ``call_id`` only for tools."""

    kind: str
    owner: str
    call_id: str | None = None


def parse_member(member: str) -> Member | None:
    """The member's parts, or None for a name this version does not know."""
    kind, _, rest = member.partition(":")
    if kind in ("tool", "approval"):
        run_id, sep, call_id = rest.partition(":")
        return Member(kind, run_id, call_id) if sep and run_id and call_id else None
    if kind in ("run", "dag", "webhook") and rest:
        return Member(kind, rest)
    return None


def now_ms() -> int:
    return int(time.time() * 1000)


def deadline_ms(bound_seconds: float, after: float | None = None) -> int:
    """When work made due now (or at ``after``, epoch seconds) must have been taken up."""
    start = time.time() if after is None else max(after, time.time())
    return int((start + bound_seconds) * 1000)
