"""The ``reactq`` command line (typer + rich), one module per command group:

=================  ===========================================================
``runs``           ``run``, ``watch``, ``interrupt``, ``cancel``, ``status``
``listing``        ``runs`` (the run index: filters, pages, ``--json``)
``batches``        ``batch FILE`` (a JSONL file, driven here), ``batch status|cancel
                   BATCH_ID`` (an HTTP batch, driven by a gateway)
``evals``          ``eval DATASET`` (cases run and scored here), ``eval show|compare``
``dags``           ``dag PLAN.json | --goal TEXT``; ``dag_ids``: ``dag status|watch|cancel``
``threads``        ``thread``, and ``run --thread`` / ``--strategy``
``approvals``      ``approvals``, ``approve``, ``reject``, ``respond``
``keys``           ``keys create|list|revoke`` (API keys of tenants)
``ops``            ``serve``, ``worker``, ``scheduler``, ``down``, ``env``, ``models``, ``tools``
``mcp``            ``mcp`` (reactq as an MCP server on stdio)
``schedules``      ``schedules create|list|show|pause|resume|delete|trigger``
``common``         consoles, the exit-code table, ``fail``; ``checks``: argument checks;
                   ``render``: the live terminal view of a run
=================  ===========================================================

Exit codes (``common.EXIT_CODES``, the same for every command): 0 ok — the run, batch or
DAG succeeded, or the command did what it was asked (cancelling something that had already
ended is nothing to do: 0); 1 the run, batch or DAG did not succeed (or had ended when the
command needed it running: interrupt); 2 bad usage — including a request refused at the door
(the message names the field and the limit), a configuration error and an id that names
nothing; 130 interrupted (Ctrl-C).

Pretty output goes to stdout, notes (the run id, how to watch it again, what was started)
to stderr, so ``reactq run … > answer.txt`` keeps only the run. ``--json`` prints the raw
events, one ``{"id", "event", "data"}`` object per line, or the object asked for.

Heavy modules (Celery, FastAPI, the engine) are imported inside the commands that need
them, so ``reactq --help`` and ``reactq status`` start fast.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

import redis.exceptions
import typer
from rich.markup import escape

from reactq.dispatcher.cli import approvals, batches, forks, helpfmt, keys, listing, mcp, ops, runs, schedules, threads
from reactq.dispatcher.cli.common import (EXIT_CODES_EPILOG, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, err,
                                          error_body, print_error)

helpfmt.install()
app = typer.Typer(name="reactq", help="ReAct agents as durable, distributed jobs on Celery and Redis.",
                  epilog=EXIT_CODES_EPILOG, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_show_locals=False)

#: Commands whose first argument may be a verb acting on a stored object by its id; without
#: one, the command does its own work (``dag PLAN.json``, ``batch FILE``). "module:function".
VERBS: dict[str, dict[str | None, str]] = {
    "dag": {None: "dags:dag", "status": "dag_ids:status", "watch": "dag_ids:watch", "cancel": "dag_ids:cancel",
            "fork": "forks:dag_fork"},
    "batch": {None: "batches:batch", "status": "batches:status", "cancel": "batches:cancel",
              "fork": "forks:batch_fork"},
    "eval": {None: "evals:run_eval", "show": "evals:show", "compare": "evals:compare"},
}
_VERB_HELP = {
    "dag": "Run a DAG ('reactq dag PLAN.json' or 'reactq dag --goal TEXT'), or act on one: "
           "'reactq dag status|watch|cancel|fork DAG_ID'.",
    "batch": "Run a JSONL file of runs here ('reactq batch FILE -o OUT'), or act on an HTTP batch: "
             "'reactq batch status|cancel|fork BATCH_ID'.",
    "eval": "Run a dataset of cases and score every run ('reactq eval DATASET.jsonl'), or read evals: "
            "'reactq eval show ID', 'reactq eval compare A B'.",
}


def resolve(spec: str) -> Callable[..., Any]:
    """``module:function`` of this package (imported only when used)."""
    module, attr = spec.split(":")
    fn: Callable[..., Any] = getattr(importlib.import_module(f"reactq.dispatcher.cli.{module}"), attr)
    return fn


def verb_command(name: str) -> Callable[[typer.Context], None]:
    """``reactq NAME [VERB] ARGS…``: the verb's command, or NAME's own."""
    verbs = VERBS[name]

    def command(ctx: typer.Context) -> None:
        args = list(ctx.args)
        verb = args[0] if args and args[0] in verbs else None
        others = ", ".join(f"'reactq {name} {v} …'" for v in verbs if v)
        sub = typer.Typer(add_completion=False, pretty_exceptions_show_locals=False)
        sub.command(epilog=None if verb else f"Also: {others}. {EXIT_CODES_EPILOG}")(resolve(verbs[verb]))
        prog = f"reactq {name}" + (f" {verb}" if verb else "")
        # With --json, click's errors reach main_json (one JSON object), not click's own printing.
        code = typer.main.get_command(sub).main(args=args[1:] if verb else args, prog_name=prog,
                                                standalone_mode="--json" not in args)
        if isinstance(code, int) and code:
            raise typer.Exit(code)

    command.__name__ = name
    command.__doc__ = _VERB_HELP[name]
    return command


def version(value: bool) -> None:
    if value:
        from importlib.metadata import version as dist_version

        print(f"reactq {dist_version('reactq')}")
        raise typer.Exit()


@app.callback()
def root(_: bool = typer.Option(False, "--version", callback=version, is_eager=True,
                                help="print reactq's version and exit")) -> None:
    """ReAct agents as durable, distributed jobs on Celery and Redis."""


_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}  # args go on as they are

# Registered in the order `reactq --help` lists them.
for run_command in (runs.run, runs.watch, runs.interrupt, runs.cancel, runs.status):
    app.command()(run_command)
app.command("fork")(forks.fork)
app.command("runs")(listing.runs)
for name in VERBS:
    app.command(name, context_settings=_PASS_THROUGH, add_help_option=False)(verb_command(name))
app.command()(ops.serve)
app.command(context_settings=_PASS_THROUGH)(ops.worker)
app.command(context_settings=_PASS_THROUGH)(ops.scheduler)
app.command()(mcp.mcp)
for ops_command in (ops.down, ops.env, ops.models, ops.tools):
    app.command()(ops_command)
app.command("thread")(threads.thread)
for approval_command in (approvals.approvals, approvals.approve, approvals.reject, approvals.respond):
    app.command()(approval_command)
# The older name of 'reactq batch cancel BATCH_ID', kept working (not listed).
app.command("batch-cancel", hidden=True)(batches.batch_cancel)
app.add_typer(schedules.app, name="schedules")
app.add_typer(keys.app, name="keys")


def main() -> None:
    as_json = "--json" in sys.argv[1:]
    try:
        sys.exit(main_json()) if as_json else app()
    except redis.exceptions.ConnectionError as exc:
        # Not a usage error and not a failed run: the infrastructure is not there.
        message = f"cannot reach Redis ({exc}); is REACTQ_REDIS_URL right?"
        if as_json:
            print_error({"code": "unavailable", "message": message})
        else:
            err.print(f"[red]error:[/] {escape(message)}")
        sys.exit(EXIT_FAILED)


def main_json() -> int:
    """``app()`` for a command line with ``--json``: a usage error click would print as text
    is one JSON object on stderr too (``{"error": {"code", "message", "field"?}}``), with
    click's exit code."""
    try:
        code = app(standalone_mode=False)
    except typer.TyperException as exc:  # typer's click: a bad argument or option
        exit_code = int(getattr(exc, "exit_code", EXIT_USAGE))
        body = error_body(getattr(exc, "format_message", exc.__str__)(), exit_code, kind="usage_error")
        param = getattr(exc, "param", None)
        if param is not None and getattr(param, "opts", None):
            body["field"] = param.opts[0]
        print_error(body)
        return exit_code
    except typer.Abort:
        return EXIT_INTERRUPTED
    return code if isinstance(code, int) else EXIT_OK


__all__ = ["VERBS", "app", "main", "resolve"]
