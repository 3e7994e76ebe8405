"""``reactq runs``: the runs in Redis, newest first, filtered like ``GET /v1/runs``.

Reads the run index the run store keeps (no SCAN), straight from Redis like every other
command: ``REACTQ_REDIS_URL`` is all it needs. ``--json`` prints the page as the HTTP API
answers it: ``{"runs": [...], "next_cursor": ...}``.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import typer

from reactq.dispatcher.cli.common import check_id, dispatcher, err, fail, out, print_json, whole_ids


def runs(
    status: Optional[str] = typer.Option(None, "--status", "-s",
                                         help="only runs in this status (queued, running, succeeded, …)"),
    batch: Optional[str] = typer.Option(None, "--batch", help="only the runs of this HTTP batch (its batch_id)"),
    thread: Optional[str] = typer.Option(None, "--thread", help="only the runs of this thread (its thread_id)"),
    schedule: Optional[str] = typer.Option(None, "--schedule", help="only the runs this schedule started (its schedule_id)"),
    limit: int = typer.Option(20, "--limit", "-n", min=1, max=500, help="runs on the page (1-500)"),
    cursor: Optional[str] = typer.Option(None, "--cursor", help="the next page: the cursor a previous page gave"),
    as_json: bool = typer.Option(False, "--json", help="print the page as JSON: {runs, next_cursor}"),
) -> None:
    """List runs, newest first (filters combine)."""
    from reactq.shared.errors import RequestError
    from reactq.shared.stores.runs_index import RunFilter, RunsIndex
    from reactq.shared.stores.runs import RUN_STATUSES

    if status is not None and status not in RUN_STATUSES:
        fail(f"--status {status!r}: one of {', '.join(RUN_STATUSES)}")
    for value, what in ((batch, "--batch"), (thread, "--thread"), (schedule, "--schedule")):
        if value is not None:
            check_id(value, what)
    d = dispatcher()
    try:
        page = RunsIndex(d.redis, d.keys).page(RunFilter(status, batch, thread, schedule), limit=limit, cursor=cursor)
    except RequestError as exc:
        fail(f"--{exc.field or 'cursor'}: {exc}")
    if as_json:
        print_json(page)
        return
    _table(page["runs"])
    if page["next_cursor"]:
        err.print(f"[dim]more: reactq runs --cursor {page['next_cursor']} (with the same filters)[/]")


def _table(rows: list[dict[str, Any]]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from reactq.dispatcher.cli.render import one_line

    table = Table("run", "status", "created", "iterations", "tokens", "query", box=None)
    for row in rows:
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row.get("created_at") or 0))
        table.add_row(row["run_id"], row.get("status") or "", created, str(row.get("iterations") or ""),
                      f"{int((row.get('usage') or {}).get('total_tokens') or 0):,}", escape(one_line(str(row.get("query") or ""), 60)))
    if not rows:
        err.print("no runs")
        return
    out.print(whole_ids(table, "run"))
