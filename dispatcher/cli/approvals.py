"""``reactq approvals``, ``approve``, ``reject``, ``respond``: people decide calls that wait.

They reach Redis directly, like ``reactq run`` (``REACTQ_REDIS_URL`` is enough). A decision
is bound to the arguments it shows: the command reads the pending request, prints its
arguments, and decides for their digest (a request that changed meanwhile is refused).
Exit codes: 0 decided, 1 refused (decided already, or the run is stopping), 2 bad usage or
an unknown run or approval.
"""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.table import Table

from reactq.dispatcher.cli.common import EXIT_FAILED, dispatcher, err, fail, handle_for, out, whole_ids
from reactq.shared.errors import ApprovalConflict, RequestError, RunNotFound


def approvals(
    run_id: str | None = typer.Option(None, "--run", help="only this run's approvals (every status)"),
    limit: int = typer.Option(50, "--limit", min=1, max=500, help="at most this many"),
    as_json: bool = typer.Option(False, "--json", help="print the approvals as JSON"),
) -> None:
    """Approvals waiting for a decision (every run's, oldest first), or one run's."""
    rows = handle_for(run_id).approvals() if run_id else dispatcher().approvals.inbox(limit=limit)["approvals"]
    if as_json:
        print(json.dumps({"approvals": rows}, ensure_ascii=False))
        return
    if not rows:
        err.print("no approvals" + (f" for run {run_id}" if run_id else " pending"))
        return
    table = Table("run", "approval", "status", "tool", "arguments", "reason", "expires")
    for a in rows:
        table.add_row(a["run_id"], a["approval_id"], a["status"], a["tool_name"],
                      json.dumps(a["tool_args"], ensure_ascii=False), a.get("reason") or "",
                      _when(a["expires_at"]))
    out.print(whole_ids(table, "run", "approval"))


def approve(
    run_id: str = typer.Argument(..., help="the run's id"),
    approval_id: str = typer.Argument(..., help="the approval's id (reactq approvals --run RUN)"),
    args: str | None = typer.Option(None, "--args", help="run with these arguments instead (JSON object): an edit"),
    by: str | None = typer.Option(None, "--by", help="who decides (kept with the approval)"),
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    """Approve a waiting call (with --args: run it with other arguments)."""
    edited = _args(args) if args is not None else None
    _decide(run_id, approval_id, "edit" if edited is not None else "approve", as_json, args=edited, by=by)


def reject(
    run_id: str = typer.Argument(..., help="the run's id"),
    approval_id: str = typer.Argument(..., help="the approval's id (reactq approvals --run RUN)"),
    message: str | None = typer.Option(None, "--message", help="why (the model reads it)"),
    by: str | None = typer.Option(None, "--by", help="who decides"),
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    """Reject a waiting call: it is not run, and the model is told so."""
    _decide(run_id, approval_id, "reject", as_json, message=message, by=by)


def respond(
    run_id: str = typer.Argument(..., help="the run's id"),
    approval_id: str = typer.Argument(..., help="the approval's id (reactq approvals --run RUN)"),
    text: str = typer.Argument(..., help="the call's answer, as the model will read it"),
    by: str | None = typer.Option(None, "--by", help="who decides"),
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    """Answer a waiting call yourself: it is not run; TEXT is its observation."""
    _decide(run_id, approval_id, "respond", as_json, message=text, by=by)


def _decide(run_id: str, approval_id: str, decision: str, as_json: bool, **kw: Any) -> None:
    handle = handle_for(run_id)
    current = handle.d.approvals.get(run_id, approval_id)
    if current is None:
        fail(f"run {run_id} has no approval {approval_id}")
    if not as_json:
        err.print(f"{current['tool_name']}({json.dumps(current['tool_args'], ensure_ascii=False)})")
    try:
        got = handle.decide(approval_id, decision, args_digest=current["args_digest"], **kw)
    except ApprovalConflict as exc:
        fail(str(exc), EXIT_FAILED)
    except (RequestError, RunNotFound) as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps(got, ensure_ascii=False))
    else:
        out.print(f"{got['approval_id']} {got['status']}")


def _args(raw: str) -> dict[str, Any]:
    from reactq.shared.inputs import loads_strict

    try:
        value = loads_strict(raw, field="--args")
    except RequestError as exc:
        fail(f"--args: {exc}")
    if not isinstance(value, dict):
        fail("--args: must be a JSON object (the tool's arguments)")
    return value


def _when(ts: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
