"""The ``reactq`` command line (typer + rich), one module per command group:

=================  ===========================================================
``runs``           ``run``, ``watch``, ``interrupt``, ``cancel``, ``status``
``batches``        ``batch`` (a JSONL file), ``batch-cancel`` (an HTTP batch)
``dags``           ``dag`` (loaded only when used)
``threads``        ``thread``, and ``run --thread`` / ``--strategy``
``ops``            ``serve``, ``worker``, ``down``, ``models``, ``tools``
``common``         consoles, exit codes, ``fail``; ``checks``: argument checks;
                   ``render``: the live terminal view of a run
=================  ===========================================================

Exit codes: 0 the run succeeded (or the command did what it was asked), 1 the run failed or
was cancelled (for ``batch``: some line did not succeed), 2 bad usage — including a request
refused at the door (the message names the field and the limit), an unknown run id and a
configuration error — and 130 interrupted (Ctrl-C).

Pretty output goes to stdout, notes (the run id, how to watch it again, what was started)
to stderr, so ``reactq run … > answer.txt`` keeps only the run. ``--json`` prints the raw
events, one ``{"id", "event", "data"}`` object per line.

Heavy modules (Celery, FastAPI, the engine) are imported inside the commands that need
them, so ``reactq --help`` and ``reactq status`` start fast.
"""

from __future__ import annotations

import sys

import redis.exceptions
import typer

from reactq.dispatcher.cli import batches, ops, runs, threads
from reactq.dispatcher.cli.common import EXIT_FAILED, err

app = typer.Typer(name="reactq", help="ReAct agents as durable, distributed jobs on Celery and Redis.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_show_locals=False)


def dag(ctx: typer.Context) -> None:
    """Run a DAG: 'reactq dag PLAN.json' or 'reactq dag --goal TEXT'."""
    # Imported here: the DAG command is only loaded when used.
    from reactq.dispatcher.cli import dags

    sub = typer.Typer(add_completion=False, pretty_exceptions_show_locals=False)
    sub.command()(dags.dag)
    typer.main.get_command(sub).main(args=ctx.args, prog_name="reactq dag")


_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}  # args go on as they are

# Registered in the order `reactq --help` lists them.
for command in (runs.run, runs.watch, runs.interrupt, runs.cancel, runs.status, batches.batch):
    app.command()(command)
app.command(context_settings=_PASS_THROUGH, add_help_option=False)(dag)
app.command()(ops.serve)
app.command(context_settings=_PASS_THROUGH)(ops.worker)
for op in (ops.down, ops.models, ops.tools):
    app.command()(op)
app.command("thread")(threads.thread)
app.command("batch-cancel")(batches.batch_cancel)


def main() -> None:
    try:
        app()
    except redis.exceptions.ConnectionError as exc:
        # Not a usage error and not a failed run: the infrastructure is not there.
        err.print(f"[red]error:[/] cannot reach Redis ({exc}); is REACTQ_REDIS_URL right?")
        sys.exit(EXIT_FAILED)


__all__ = ["app", "main"]
