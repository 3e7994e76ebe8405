"""Two kinds of batch, one command word:

* ``reactq batch FILE -o OUT`` runs a JSONL file *here*: this process drives it and the
  output file is its record (stop it with Ctrl-C, resume it by running the same command).
  Exit 0 when every line succeeded, 1 when some did not, 130 interrupted.
* ``reactq batch status | cancel BATCH_ID`` act on an *HTTP batch* (``POST /v1/batches``),
  which a gateway drives and Redis keeps. ``cancel``: its runs in flight are cancelled and
  the lines not started end ``skipped``; exit 0 once asked, or when it had already ended
  (nothing to cancel); 2 for an unknown id. ``reactq batch-cancel BATCH_ID`` is the same
  command.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from reactq.dispatcher.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    check_id,
    dispatcher,
    ensure_local_workers,
    err,
    fail,
    out,
    print_json,
    settings,
)
from reactq.shared.errors import ConfigError

if TYPE_CHECKING:
    from reactq.dispatcher.batch.store import BatchView


def batch(
    input_file: Path = typer.Argument(..., exists=True, dir_okay=False, readable=True,
                                      help="JSONL: one RunRequest (optionally with an id) per line"),
    output: Path = typer.Option(..., "--output", "-o", help="JSONL results (appended; resumable)"),
    concurrency: int = typer.Option(8, "--concurrency", "-c", min=1, max=1000, help="runs in flight (1-1000)"),
    token_budget: Optional[int] = typer.Option(None, "--token-budget", min=1,
                                               help="stop starting lines once the batch's runs used this many tokens"),
) -> None:
    """Run every line of a JSONL file here; rerun with the same output file to resume.

    'reactq batch status|cancel BATCH_ID' act on an HTTP batch (POST /v1/batches) instead."""
    from reactq.dispatcher.batch.files import run_file_batch
    from reactq.dispatcher.cli.checks import input_file_problem, output_file_problem

    if why := input_file_problem(input_file) or output_file_problem(output):
        fail(why)
    s = settings()
    d = dispatcher(s)
    try:
        d.catalog()  # reach Redis and the registries now: a config error is exit 2, not N bad lines
        ensure_local_workers(s, d)
        tally, interrupted = run_file_batch(input_file, output, concurrency=concurrency, dispatcher=d,
                                            console=err, token_budget=token_budget)
    except ConfigError as exc:
        fail(str(exc))
    summary = (f"{tally.done}/{tally.total} done: {tally.succeeded} succeeded, {tally.failed} failed, "
               f"{tally.invalid} invalid, {tally.tokens:,} tokens → {output}")
    if tally.skipped:
        summary += f"\n{tally.skipped} line(s) skipped: {tally.stopped}"
    if interrupted:
        err.print(f"interrupted: {summary}\nrerun the same command to resume (runs in flight are re-attached)")
        raise typer.Exit(EXIT_INTERRUPTED)
    err.print(summary)
    raise typer.Exit(EXIT_OK if tally.succeeded == tally.total else EXIT_FAILED)


BATCH_ID = typer.Argument(..., help="the HTTP batch's id (POST /v1/batches answers it)")


def _batch_view(batch_id: str) -> tuple[Any, BatchView]:
    """(the batch store, the batch's progress), or exit 2 for an id that names nothing."""
    from reactq.dispatcher.batch.store import BatchStore

    check_id(batch_id, "BATCH_ID")
    d = dispatcher()
    store = BatchStore(d.redis, d.keys, d.settings.run_ttl_seconds)
    view = store.view(batch_id, with_results=False)
    if view is None:
        fail(f"no batch with id {batch_id!r} (it may have expired)")
    return store, view


def status(
    batch_id: str = BATCH_ID,
    as_json: bool = typer.Option(False, "--json", help="print the progress as JSON (as GET /v1/batches/{id})"),
) -> None:
    """An HTTP batch's progress: done, succeeded, failed, invalid, running, queued, tokens."""
    _, view = _batch_view(batch_id)
    if as_json:
        print_json(view)
        return
    from rich.table import Table

    table = Table(show_header=False, box=None)
    for key, value in view.items():
        if key not in ("created_at", "updated_at") and value is not None:
            table.add_row(key, f"{value:,}" if isinstance(value, int) else str(value))
    out.print(table)


def cancel(
    batch_id: str = BATCH_ID,
    as_json: bool = typer.Option(False, "--json", help="print {batch_id, status} as JSON"),
) -> None:
    """Cancel an HTTP batch: its runs in flight are cancelled, lines not started skipped."""
    store, view = _batch_view(batch_id)
    if view["status"] != "running":
        err.print(f"batch {batch_id} has already ended ({view['status']}): nothing to cancel")
        status_now = view["status"]
    else:
        store.request_cancel(batch_id)
        status_now = "cancelling"
        if not as_json:
            out.print(f"batch {batch_id}: cancelling (runs in flight are cancelled, lines not started skipped)")
    if as_json:
        print_json({"batch_id": batch_id, "status": status_now})


def batch_cancel(batch_id: str = BATCH_ID) -> None:
    """The older name of 'reactq batch cancel BATCH_ID'."""
    cancel(batch_id, as_json=False)
