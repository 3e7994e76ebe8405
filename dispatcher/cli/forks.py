"""``reactq fork RUN``, ``reactq batch fork BATCH``, ``reactq dag fork DAG``: forks made
straight in Redis, as ``POST /v1/runs/{id}/fork`` and its siblings make them.

``fork`` prints the plan (what each call the parent made from the fork's turn on does if the
fork's model makes it again) and, unless ``--dry-run``, the fork's id: exit 0 once made.
``batch fork`` makes the new batch and drives it here until it ends, as a gateway would, or
waits for the process that drives it (exit 0 when every line succeeded, 1 otherwise, 130 on
Ctrl-C: a gateway that starts resumes it);
``dag fork`` makes the new DAG (exit 0). An unknown id, a run or DAG that has not ended, a
``last_failure`` of a run that did not fail, a DAG without a failed step: exit 2 naming why.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Optional

import typer

from reactq.dispatcher.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    check_id,
    dispatcher,
    err,
    fail,
    out,
    print_json,
    settings,
)

FROM_HELP = "where the fork starts: last_failure (default), last_turn, or a turn number (1, 2, …)"
REUSE_HELP = ("which of the parent's recorded calls the fork reuses when made again: effects (the "
              "non-idempotent ones, default), all, none")


def _start(value: str) -> str | int:
    if value in ("last_failure", "last_turn"):
        return value
    try:
        return int(value)
    except ValueError:
        fail(f"--from: last_failure, last_turn or a turn number, got {value!r}")


def _fork_errors(call: Any) -> Any:
    """``call()``, with a refusal as exit 2 naming why."""
    from pydantic import ValidationError

    from reactq.dispatcher.cli.common import validation_message
    from reactq.shared.errors import ForkConflict, RequestError, RunNotFound

    try:
        return call()
    except (RunNotFound, ForkConflict, RequestError) as exc:
        fail(str(exc))
    except ValidationError as exc:
        fail(validation_message(exc))


def _plan_table(plan: dict[str, Any]) -> None:
    from rich.table import Table

    out.print(f"fork from turn {plan['turn']}, keeping {plan['history_messages']} message(s) of history")
    if not plan["calls"]:
        out.print("the parent made no tool call from that turn on")
        return
    table = Table("turn", "call", "tool", "ledger", "idempotent", "if made again")
    for c in plan["calls"]:
        table.add_row(str(c["turn"]), c["tool_call_id"], c["tool_name"], c["ledger"],
                      "yes" if c["idempotent"] else "no", c["if_repeated"])
    out.print(table)


def fork(
    run_id: str = typer.Argument(..., help="the run to fork (it must have ended)"),
    start: str = typer.Option("last_failure", "--from", help=FROM_HELP),
    message: Optional[str] = typer.Option(None, "--message", help="a user message before the fork's first turn"),
    reuse: str = typer.Option("effects", "--reuse", help=REUSE_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the plan only; create nothing"),
    as_json: bool = typer.Option(False, "--json", help="print {run_id, forked_from, plan} as JSON"),
) -> None:
    """Fork an ended run: a new run with its history before a turn, its tools' results reused."""
    from reactq.dispatcher.fork import fork_run
    from reactq.shared.fork.models import ForkRequest

    check_id(run_id, "RUN")
    body = {"from": _start(start), "reuse": reuse, "dry_run": dry_run,
            "edit": {"message": message} if message else None}
    req = _fork_errors(lambda: ForkRequest.model_validate(body))
    forked = _fork_errors(lambda: fork_run(dispatcher(), run_id, req))
    plan = forked.plan.model_dump(mode="json")
    new_id = forked.handle.run_id if forked.handle is not None else None
    if as_json:
        print_json({"run_id": new_id, "forked_from": forked.forked_from, "plan": plan})
        return
    _plan_table(plan)
    if new_id is not None:
        out.print(f"fork {new_id} of run {run_id} (watch it: reactq watch {new_id})")


def batch_fork(
    batch_id: str = typer.Argument(..., help="the HTTP batch to fork"),
    status: list[str] = typer.Option(["failed"], "--status", help="fork the lines of this status (repeatable)"),
    start: str = typer.Option("last_failure", "--from", help=FROM_HELP),
    reuse: str = typer.Option("effects", "--reuse", help=REUSE_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the counts only; create nothing"),
    as_json: bool = typer.Option(False, "--json", help="print {batch_id, forked_from, forked, kept} as JSON"),
) -> None:
    """A new batch: the failed lines forked from their runs, the others kept; driven here."""
    from reactq.dispatcher.batch.fork import fork_batch
    from reactq.dispatcher.batch.store import BatchStore
    from reactq.shared.fork.models import BatchForkRequest

    check_id(batch_id, "BATCH_ID")
    req = _fork_errors(lambda: BatchForkRequest.model_validate(
        {"status": status, "from": _start(start), "reuse": reuse, "dry_run": dry_run}))
    d = dispatcher()
    store = BatchStore(d.redis, d.keys, d.settings.run_ttl_seconds)
    got = _fork_errors(lambda: fork_batch(d, store, batch_id, req))
    summary = {"batch_id": got.batch_id, "forked_from": batch_id, "forked": got.forked, "kept": got.kept}
    if as_json:
        print_json(summary)
    else:
        out.print(f"{'would fork' if dry_run else 'forked'} {got.forked} line(s), kept {got.kept}"
                  + (f": batch {got.batch_id}" if got.batch_id else ""))
    if got.batch_id is None:
        return
    raise typer.Exit(_drive_here(d, store, got.batch_id))


def _drive_here(d: Any, store: Any, batch_id: str) -> int:
    """Drive the new batch in this process until it ends; while another process holds its
    lease (a gateway, or a command that was killed: its lease runs out), wait for it."""
    from reactq.dispatcher.batch.store import drive_stored_batch, holder_name

    holder = holder_name()
    stop = threading.Event()
    try:
        while store.view(batch_id, with_results=False)["status"] == "running":
            if store.claim(batch_id, holder):
                drive_stored_batch(d, store, batch_id, holder, stop)
            else:
                time.sleep(0.5)
    except KeyboardInterrupt:
        stop.set()
        store.release(batch_id)
        err.print(f"interrupted: batch {batch_id} goes on when a gateway resumes it")
        return EXIT_INTERRUPTED
    view = store.view(batch_id, with_results=False)
    err.print(f"batch {batch_id}: {view['succeeded']}/{view['total']} succeeded")
    return EXIT_OK if view["succeeded"] == view["total"] else EXIT_FAILED


def dag_fork(
    dag_id: str = typer.Argument(..., help="the DAG to fork (it must have ended with a failed step)"),
    as_json: bool = typer.Option(False, "--json", help="print {dag_id, forked_from, kept, rerun} as JSON"),
) -> None:
    """A new DAG: succeeded steps kept, failed steps re-run as forks of their runs, then answered again."""
    from reactq.dispatcher.dag import DagDispatcher
    from reactq.dispatcher.dag_fork import fork_dag

    check_id(dag_id, "DAG_ID")
    got = _fork_errors(lambda: fork_dag(DagDispatcher(settings()), dag_id))
    if as_json:
        print_json({"dag_id": got.dag_id, "forked_from": dag_id, "kept": got.kept, "rerun": got.rerun})
        return
    out.print(f"DAG {got.dag_id}: kept {', '.join(got.kept) or 'no step'}; re-running {', '.join(got.rerun)} "
              f"(watch it: reactq dag watch {got.dag_id})")
