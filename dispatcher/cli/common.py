"""What every command group of the CLI shares: the consoles, the exit codes, ``fail``, and
the settings / dispatcher / run handle a command starts from (exit 2 naming the problem).

Heavy modules (Celery, the local model, the engine) are imported inside the functions that
need them, so ``reactq --help`` and ``reactq status`` start fast.
"""

from __future__ import annotations

import json
import re
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from reactq.shared.errors import ConfigError, LocalServiceError, RunNotFound
from reactq.shared.settings import Settings

if TYPE_CHECKING:
    from reactq.dispatcher.client import Dispatcher, RunHandle
    from reactq.shared.events import Event

out = Console(highlight=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

#: The one exit-code table of every command: (code, meaning, what falls under it).
#: ``reactq --help`` shows the first two columns; docs/cli.md all three.
EXIT_CODES = (
    (EXIT_OK, "ok", "the run, batch or DAG succeeded, or the command did what it was asked: shown, "
                    "listed, cancel requested, or nothing to cancel because it had already ended"),
    (EXIT_FAILED, "the run, batch or DAG did not succeed",
     "it failed or was cancelled (a batch: some line did not succeed); or it had ended when the command "
     "needed it running (interrupt); a busy thread refused the run; Redis could not be reached"),
    (EXIT_USAGE, "usage or not found", "a bad argument or option, a request refused at the door (the "
                                       "message names the field and the limit), a configuration error, "
                                       "an id that names nothing"),
    (EXIT_INTERRUPTED, "interrupted", "Ctrl-C; a run, batch or DAG left running goes on"),
)
EXIT_CODES_EPILOG = "Exit codes: " + " · ".join(f"{code} {short}" for code, short, _ in EXIT_CODES) + "."


def fail(message: str, code: int = EXIT_USAGE, *, kind: str | None = None, field: str | None = None) -> NoReturn:
    """Say what is wrong on stderr and exit ``code``. With ``--json``: one JSON object
    ``{"error": {"code", "message", "field"?}}`` (``error_body``)."""
    if json_errors():
        print_error(error_body(message, code, kind=kind, field=field))
    else:
        err.print(f"[red]error:[/] {escape(message)}", markup=True, highlight=False)
    raise typer.Exit(code)


def json_errors() -> bool:
    """Was ``--json`` given on the command line?"""
    return "--json" in sys.argv[1:]


#: An error's ``code`` with ``--json``: what kind of problem, whatever the message says.
ERROR_CODES = ("usage_error", "validation_error", "not_found", "config_error", "conflict",
               "unavailable", "failed")
_FIELD = re.compile(r"^(--[\w-]+|[A-Za-z_][\w.]*)(?: '[^']*')?: ")


def error_body(message: str, exit_code: int = EXIT_USAGE, *, kind: str | None = None,
               field: str | None = None) -> dict[str, Any]:
    """``{"code", "message", "field"?}``: ``kind`` and ``field`` when the caller knows them,
    else read from the message's usual forms ("invalid request: query: …", "--status: …")."""
    lowered = message.lower()
    rest = message
    for prefix, guessed in (("invalid request: ", "validation_error"), ("bad configuration: ", "config_error")):
        if lowered.startswith(prefix):
            kind, rest = kind or guessed, message[len(prefix):]
    if kind is None:
        names_nothing = lowered.startswith("no ") or "not found" in lowered or "may have expired" in lowered
        kind = "not_found" if names_nothing else ("failed" if exit_code == EXIT_FAILED else "usage_error")
    if field is None and (m := _FIELD.match(rest)):
        field = m.group(1)
    body: dict[str, Any] = {"code": kind, "message": message}
    if field:
        body["field"] = field
    return body


def print_error(body: dict[str, Any]) -> None:
    print(json.dumps({"error": body}, ensure_ascii=False), file=sys.stderr, flush=True)


def check_id(value: str, what: str) -> None:
    """A run, DAG or batch id of the one id pattern, else exit 2 naming ``what``."""
    from reactq.dispatcher.cli.checks import id_problem

    if why := id_problem(value, what):
        fail(why)


def whole_ids(table: Table, *columns: str) -> Table:
    """Ids are never cut or wrapped, whatever the terminal's width: ``columns`` (by header) get
    the width of their longest cell; the other columns share what is left."""
    for column in table.columns:
        if column.header in columns:
            column.no_wrap = True
            column.min_width = max([len(str(c)) for c in column.cells] + [len(str(column.header))])
    return table


def print_json(value: object) -> None:
    print(json.dumps(value, ensure_ascii=False), flush=True)


def validation_message(exc: ValidationError) -> str:
    """Each bad field with pydantic's message, which states the limit."""
    from reactq.dispatcher.batch.items import format_validation

    return format_validation(exc)


def settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        fail(f"bad configuration: {validation_message(exc)}")


def with_model(s: Settings) -> Settings:
    """A configured model, else the bundled local one (started once, shared), else exit 2
    saying what to set or install (``reactq.dispatcher.local.model``)."""
    from reactq.dispatcher.local.model import resolve_model

    try:
        return resolve_model(s)
    except ConfigError as exc:
        fail(str(exc), kind="config_error")
    except RuntimeError as exc:  # the local server would not start
        fail(f"the local model did not start: {exc}", EXIT_FAILED, kind="unavailable")


def local(s: Settings) -> Settings:
    """``s`` with a Redis: the configured one, else the embedded Valkey (started on first use,
    under ``REACTQ_DATA_DIR``): the command line's local convenience."""
    from reactq.shared.redisconn import with_embedded

    try:
        return with_embedded(s)
    except RuntimeError as exc:
        fail(f"the embedded Valkey did not start: {exc}", EXIT_FAILED, kind="unavailable")


def dispatcher(s: Settings | None = None) -> Dispatcher:
    from reactq.dispatcher.client import Dispatcher

    return Dispatcher(local(s or settings()))


def handle_for(run_id: str) -> RunHandle:
    check_id(run_id, "RUN_ID")
    try:
        return dispatcher().handle(run_id)
    except RunNotFound as exc:
        fail(str(exc), kind="not_found", field="run_id")


def exit_code_for(status: str | None) -> int:
    """A run's, batch's or DAG's final status → 0 succeeded, else 1."""
    return EXIT_OK if status == "succeeded" else EXIT_FAILED


def print_json_event(stream_id: str | None, event: Event) -> None:
    from reactq.dispatcher.cli.render import json_line

    print(json_line(stream_id, event), flush=True)


def ensure_local_workers(s: Settings, d: Dispatcher) -> None:
    """No worker answers ⇒ start one here (the embedded default: works on a fresh machine)."""
    from reactq.dispatcher.local.workers import ensure_local_workers as ensure

    try:
        ensure(d.settings, d.celery, err)  # the dispatcher's: with the embedded server's URL
    except LocalServiceError as exc:
        fail(str(exc), EXIT_FAILED, kind="unavailable")
