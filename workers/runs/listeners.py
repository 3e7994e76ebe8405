"""What happens once a run has ended: the after-commit listeners.

The driver commits a run's final step and then tells every listener that wants the run
(dramatiq's ``after_process_message`` shape): the thread hands itself on to its next run, a
DAG step's parent is told its child ended. A new end-of-run concern is one more listener in
``ON_RUN_END``, not one more branch in the driver.

A listener is told again when a task redelivered after a crash finds the run already ended
(the crash may have come between the commit and the listeners), so every listener must be
idempotent. A run that no listener wants hands its lease over in its final commit's round
trip (``step.commit``); a run without a thread or a DAG parent pays a dict lookup per
listener.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reactq.shared.engine.state import RunState
from reactq.shared.wire import DAG_STEP_DONE, RUNS_QUEUE
from reactq.workers import webhooks
from reactq.workers.runs import threads
from reactq.workers.runtime import Runtime

Send = Callable[[str, list[Any], str], None]
"""``send(task name, args, queue)``: how the driver sends a task."""


@dataclass(frozen=True)
class EndListener:
    """One end-of-run concern: ``wants`` (pure, cheap) says whether ``notify`` has work."""

    name: str
    wants: Callable[[RunState], bool]
    notify: Callable[[Runtime, RunState, Send], None]


def _dag_parent(state: RunState) -> dict[str, Any] | None:
    parent = state.metadata.get("_dag")
    return parent if isinstance(parent, dict) else None


def _tell_dag(rt: Runtime, state: RunState, send: Send) -> None:
    parent = _dag_parent(state)
    if parent is not None:  # the DAG reconciles from its children: telling it twice is harmless
        send(DAG_STEP_DONE, [parent["dag_id"], parent["step_id"], state.run_id], RUNS_QUEUE)


ON_RUN_END: tuple[EndListener, ...] = (
    EndListener("dag_parent", lambda s: _dag_parent(s) is not None, _tell_dag),
    EndListener("thread", lambda s: bool(s.thread_id), threads.ended),
    # The message was armed by the final commit itself (step.save): a crash before this
    # send leaves it to the watchdog.
    EndListener("webhook", lambda s: s.webhook_on_done,
                lambda rt, s, send: webhooks.send_done("run", s.run_id, send)),
)


def wanted(state: RunState) -> bool:
    """Whether any listener has work once this run ends."""
    return any(listener.wants(state) for listener in ON_RUN_END)


def run_ended(rt: Runtime, state: RunState, send: Send) -> None:
    """Tell every listener that wants it that ``state``'s run has ended (committed)."""
    for listener in ON_RUN_END:
        if listener.wants(state):
            listener.notify(rt, state, send)
