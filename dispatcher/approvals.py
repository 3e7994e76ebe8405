"""Approvals from the dispatcher's side: deciding lives with the door
(``reactq.shared.service.approvals``); the views of DAGs and batches that wait for a person
are here.
"""

from __future__ import annotations

from typing import Any

from reactq.shared.service.approvals import MAX_MESSAGE, ApprovalDoor, check, decide

__all__ = ["MAX_MESSAGE", "ApprovalDoor", "check", "decide", "waiting_lines", "with_waiting"]


def with_waiting(store: Any, view: dict[str, Any]) -> dict[str, Any]:
    """A DAG's view (``GET /v1/dags/{id}``) where a running step whose child run waits for a
    person says ``waiting``, and so does the DAG while nothing else of it runs."""
    steps = [s for s in view.get("steps") or [] if s.get("status") == "running" and s.get("run_id")]
    if not steps:
        return view
    rows = store.fields_of([s["run_id"] for s in steps], "status")
    for step, (status,) in zip(steps, rows, strict=True):
        if status == "waiting":
            step["status"] = "waiting"
    if view.get("status") == "running" and all(s["status"] == "waiting" for s in steps):
        view["status"] = "waiting"
    return view


def waiting_lines(client: Any, keys: Any, batch_id: str) -> int:
    """How many runs of an HTTP batch wait for a person (the batch goes on without them)."""
    from reactq.shared.stores.runs_index import MAX_LIMIT, RunFilter, RunsIndex

    page = RunsIndex(client, keys).page(RunFilter(status="waiting", batch_id=batch_id), limit=MAX_LIMIT)
    return len(page["runs"])
