"""Deciding approvals (HTTP, CLI, ``RunHandle.decide``): check the decision, take it in its
script (``reactq.shared.stores.approvals``), send what it made due.
"""

from __future__ import annotations

from typing import Any, Protocol

from reactq.shared.engine.approval import DECIDED
from reactq.shared.errors import RequestError
from reactq.shared.stores.approvals import ApprovalStore
from reactq.shared.stores.runs import RunStore

MAX_MESSAGE = 20_000


class ApprovalDoor(Protocol):
    """What ``decide`` uses of the door (``Door`` fits)."""

    @property
    def approvals(self) -> ApprovalStore: ...
    @property
    def store(self) -> RunStore: ...
    def send(self, task: str, args: list[Any], queue: str = ...) -> None: ...


def check(decision: str, args: dict[str, Any] | None, message: str | None) -> None:
    """A decision's own rules; ``RequestError`` naming the field."""
    if decision not in DECIDED:
        raise RequestError(f"decision must be one of {', '.join(DECIDED)}", field="decision")
    if decision == "edit" and not isinstance(args, dict):
        raise RequestError("an edit needs args: the arguments to run the call with (an object)", field="args")
    if decision != "edit" and args is not None:
        raise RequestError("args go with decision 'edit' only", field="args")
    if decision == "respond" and not (message or "").strip():
        raise RequestError("a response needs message: it is the call's answer", field="message")
    if message is not None and len(message) > MAX_MESSAGE:
        raise RequestError(f"message: at most {MAX_MESSAGE} characters", field="message")


def decide(d: ApprovalDoor, run_id: str, approval_id: str, decision: str, *, args_digest: str | None,
           args: dict[str, Any] | None = None, message: str | None = None,
           by: str | None = None) -> dict[str, Any]:
    """Take ``decision`` and send what it made due; ``{approval_id, status}``."""
    check(decision, args, message)
    if args_digest is None:  # the Python caller who read the pending request just now
        current = d.approvals.get(run_id, approval_id)
        args_digest = current.get("args_digest") if current else None
    done = d.approvals.decide(run_id, approval_id, decision, digest=args_digest or "", args=args,
                              message=message, by=by)
    if done.new and done.old != done.new:
        d.store.move_status(run_id, done.new, done.created_at)
    for task, task_args, queue in done.sends:
        d.send(task, task_args, queue)
    return {"approval_id": approval_id, "status": done.record["status"]}


__all__ = ["MAX_MESSAGE", "ApprovalDoor", "check", "decide"]
