"""``reactq dag status | watch | cancel DAG_ID``: a DAG already submitted (by ``reactq dag``,
``POST /v1/dags`` or ``DagDispatcher``), read and changed straight in Redis.

Exit codes as everywhere: ``status`` 0 once shown; ``watch`` 0 when the DAG succeeded, 1 when
it failed or was cancelled, 130 on Ctrl-C (the DAG goes on); ``cancel`` 0 once asked (or when
it had already ended: nothing to cancel); an unknown id is 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from reactq.dispatcher.cli.common import (
    EXIT_INTERRUPTED,
    check_id,
    err,
    exit_code_for,
    fail,
    out,
    print_json,
    settings,
)

if TYPE_CHECKING:
    from reactq.dispatcher.dag import DagHandle

DAG_ID = typer.Argument(..., help="the DAG's id (reactq dag and POST /v1/dags print it)")
AS_JSON = "--json"


def dag_handle(dag_id: str) -> DagHandle:
    from reactq.dispatcher.dag import DagDispatcher
    from reactq.shared.errors import RunNotFound

    check_id(dag_id, "DAG_ID")
    try:
        return DagDispatcher(settings()).handle(dag_id)
    except RunNotFound as exc:  # DagNotFound
        fail(str(exc))


def status(
    dag_id: str = DAG_ID,
    as_json: bool = typer.Option(False, AS_JSON, help="print the status as JSON (as GET /v1/dags/{id})"),
) -> None:
    """A DAG's status: its steps (status, child run, result), the answer once done."""
    from reactq.dispatcher.cli.dags import steps_table

    view = dag_handle(dag_id).status()
    if as_json:
        print_json(view)
        return
    out.print(steps_table(view))
    if view.get("answer"):
        out.print(view["answer"], markup=False, highlight=False)


def watch(
    dag_id: str = DAG_ID,
    as_json: bool = typer.Option(False, AS_JSON, help="print raw events as JSON lines"),
) -> None:
    """Follow a DAG (its steps table, or its events with --json) until it ends."""
    from reactq.dispatcher.cli.dags import follow_json, follow_live

    handle = dag_handle(dag_id)
    try:
        done = follow_json(handle) if as_json else follow_live(handle, out)
    except KeyboardInterrupt:
        err.print(f"\nstopped watching; DAG {dag_id} goes on")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if not as_json and done.get("answer"):
        out.print(done["answer"], markup=False, highlight=False)
    raise typer.Exit(exit_code_for(done.get("status")))


def cancel(
    dag_id: str = DAG_ID,
    wait: bool = typer.Option(False, "--wait", help="wait until the DAG has ended"),
    as_json: bool = typer.Option(False, AS_JSON, help="print {dag_id, status} as JSON"),
) -> None:
    """Cancel a DAG: running steps' child runs are cancelled, pending steps skipped."""
    from reactq.shared.dag.state import TERMINAL_DAG_STATUSES

    handle = dag_handle(dag_id)
    before = handle.status()["status"]
    if before in TERMINAL_DAG_STATUSES:
        err.print(f"DAG {dag_id} has already ended ({before}): nothing to cancel")
    else:
        handle.cancel()
    final = handle.result(timeout=None)["status"] if wait and before not in TERMINAL_DAG_STATUSES else None
    now = final or handle.status()["status"]
    if as_json:
        print_json({"dag_id": dag_id, "status": now})
    elif before not in TERMINAL_DAG_STATUSES:
        out.print(f"DAG {dag_id} {now}" if final else f"cancel requested for DAG {dag_id}")
