"""``reactq batch FILE -o OUT`` (a JSONL file of runs, resumable) and ``reactq batch-cancel
BATCH_ID`` (the CLI way to ``POST /v1/batches/{id}/cancel``).

``batch`` exits 0 when every line succeeded, 1 when some did not, 130 interrupted (rerun the
same command to resume). ``batch-cancel``: the batch's driver (in the gateway) cancels its
runs in flight and ends the lines not started ``skipped``; exit 0 once asked, 2 for an
unknown batch, 1 if it had already ended.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, cast

import typer

from reactq.dispatcher.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    dispatcher,
    ensure_local_workers,
    err,
    fail,
    out,
    settings,
)
from reactq.shared.errors import ConfigError


def batch(
    input_file: Path = typer.Argument(..., exists=True, dir_okay=False, readable=True,
                                      help="JSONL: one RunRequest (optionally with an id) per line"),
    output: Path = typer.Option(..., "--output", "-o", help="JSONL results (appended; resumable)"),
    concurrency: int = typer.Option(8, "--concurrency", "-c", min=1, max=1000, help="runs in flight"),
    token_budget: Optional[int] = typer.Option(None, "--token-budget", min=1,
                                               help="stop starting lines once the batch's runs used this many tokens"),
) -> None:
    """Run every line of a JSONL file; rerun with the same output file to resume."""
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


def batch_cancel(batch_id: str = typer.Argument(..., help="the id POST /v1/batches returned")) -> None:
    """Cancel an HTTP batch: its runs are cancelled, lines not started are skipped."""
    from reactq.dispatcher.batch.store import BatchStore

    d = dispatcher()
    status = cast(bytes | None, d.redis.hget(d.keys.batch(batch_id), "status"))
    if status is None:
        fail(f"no batch with id {batch_id!r} (it may have expired)")
    if status != b"running":
        err.print(f"batch {batch_id} has already ended ({status.decode()})")
        raise typer.Exit(EXIT_FAILED)
    BatchStore(d.redis, d.keys, d.settings.run_ttl_seconds).request_cancel(batch_id)
    out.print(f"batch {batch_id}: cancelling (runs in flight are cancelled, lines not started skipped)")
