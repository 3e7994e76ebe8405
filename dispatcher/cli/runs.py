"""``reactq run | watch | interrupt | cancel | status``: one run, from the terminal.

``run`` renders the run live (``render.py``) or, with ``--json``, prints its raw events; with
``--local`` it runs in this process (the in-process shell: no Redis, no workers).
"""

from __future__ import annotations

import asyncio
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from pydantic import ValidationError
from rich.table import Table

from reactq.dispatcher.cli import threads
from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.dispatcher.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    dispatcher,
    ensure_local_workers,
    err,
    exit_code_for,
    fail,
    handle_for,
    out,
    print_json,
    print_json_event,
    settings,
    validation_message,
    with_model,
)
from reactq.shared.errors import ConfigError, RequestError
from reactq.shared.settings import Settings

if TYPE_CHECKING:
    from reactq.dispatcher.client import RunHandle
    from reactq.shared.events import Event
    from reactq.shared.requests import RunRequest


RUN_ID_HELP = "the run's id (reactq run, reactq runs and POST /v1/runs print it)"


class Mode(str, Enum):
    auto = "auto"
    json = "json"
    native = "native"


def build_request(query: str, model: str | None, tools: str | None, mode: Mode,
                  max_iterations: int | None, completion_check: bool,
                  output_schema: str | None = None) -> RunRequest:
    """Options → a validated ``RunRequest`` (exit 2 naming the field otherwise)."""
    from reactq.shared.requests import RunRequest

    fields: dict[str, Any] = {"query": query, "mode": mode.value, "completion_check": completion_check}
    if output_schema is not None:
        fields["output_schema"] = read_schema(output_schema)
    if model:
        fields["model"] = model
    if tools is not None:
        fields["tools"] = [t.strip() for t in tools.split(",") if t.strip()]
    if max_iterations is not None:
        fields["max_iterations"] = max_iterations
    try:
        return RunRequest.model_validate(fields)
    except ValidationError as exc:
        fail(f"invalid request: {validation_message(exc)}")


def read_schema(spec: str) -> Any:
    """``--output-schema``: inline JSON (``{...}``) or the path of a JSON file."""
    from reactq.shared.inputs import loads_strict

    try:
        text = spec if spec.lstrip().startswith("{") else Path(spec).read_text()
        return loads_strict(text, field="output_schema")
    except OSError as exc:
        fail(f"--output-schema: cannot read {spec!r}: {exc.strerror or exc}")
    except RequestError as exc:
        fail(f"--output-schema: {exc}")


def follow(handle: RunHandle, *, as_json: bool, after: str | None = None) -> int:
    """Stream a run's events to the terminal until ``done``; returns the exit code."""
    from reactq.dispatcher.cli.render import RunRenderer

    renderer = None if as_json else RunRenderer(out)
    final_status: str | None = None
    try:
        for stream_id, event in handle.events(after=after):
            if renderer is None:
                print_json_event(stream_id, event)
            else:
                renderer.handle(event, stream_id)
            if event.channel == "done":
                final_status = event.data.get("status")
    finally:
        if renderer is not None:
            renderer.close()
    return exit_code_for(final_status)


def ask_what_to_do(handle: RunHandle) -> None:
    """Ctrl-C during ``run``: cancel the run, or leave it running and say how to watch it.
    Without a terminal to ask on, the run is left running."""
    watch = f"reactq watch {handle.run_id}"
    if sys.stdin.isatty():
        try:
            cancel = typer.confirm("\nCancel the run? (no = leave it running)", default=False, err=True)
        except (KeyboardInterrupt, EOFError, typer.Abort):
            cancel = False
        if cancel:
            handle.cancel()
            err.print(f"cancel requested for run {handle.run_id}")
            return
    err.print(f"\nrun {handle.run_id} left running; watch it with: [bold]{watch}[/]")


def run_distributed(req: RunRequest, s: Settings, as_json: bool) -> int:
    d = dispatcher(s)
    try:
        d.validate(req)
    except RequestError as exc:
        fail(f"invalid request: {exc}")
    ensure_local_workers(s, d)
    handle = threads.submit(d, req)
    err.print(f"[dim]run {handle.run_id} · watch: reactq watch {handle.run_id}[/]")
    try:
        return follow(handle, as_json=as_json)
    except KeyboardInterrupt:
        ask_what_to_do(handle)
        return EXIT_INTERRUPTED


def run_in_process(req: RunRequest, s: Settings, as_json: bool) -> int:
    """``--local``: the in-process shell, same engine and events, no Redis and no workers."""
    from reactq.dispatcher.cli.render import RunRenderer
    from reactq.shared.engine.deps import build_deps
    from reactq.shared.hooks.loader import default_hooks
    from reactq.shared.inprocess import run_local
    from reactq.shared.llm.registry import load_registry
    from reactq.shared.requests import check_run_request
    from reactq.shared.settings import EngineConfig
    from reactq.shared.tools.loader import default_registry

    models = load_registry(s)
    tools = default_registry(s)
    try:
        check_run_request(req, tools=tools.names(), models=models.list_models())
    except RequestError as exc:
        fail(f"invalid request: {exc}")
    deps = build_deps(models, tools, default_hooks(s), EngineConfig(), req.model)
    renderer = None if as_json else RunRenderer(out)

    class Sink:
        async def emit(self, events: list[Event]) -> None:
            for e in events:
                if renderer is None:
                    print_json_event(None, e)
                else:
                    renderer.handle(e)

    try:
        state = asyncio.run(run_local(req, deps, sink=Sink()))
    except KeyboardInterrupt:
        err.print("\nstopped (an in-process run ends with its process)")
        return EXIT_INTERRUPTED
    finally:
        if renderer is not None:
            renderer.close()
    return exit_code_for(state.status)


def run(
    query: str = typer.Argument(..., help="the question"),
    model: str | None = typer.Option(None, "--model", "-m", help="a model name from the registry"),
    tools: str | None = typer.Option(None, "--tools", "-t", help="comma-separated tool allowlist"),
    mode: Mode = typer.Option(Mode.auto, "--mode", help="tool-loop mode (auto: native tool calls when the model has them)"),
    as_json: bool = typer.Option(False, "--json", help="print raw events as JSON lines"),
    local: bool = typer.Option(False, "--local", help="run in this process (no Redis, no workers)"),
    max_iterations: int | None = typer.Option(None, "--max-iterations", help="loop limit (1..200)"),
    no_completion_check: bool = typer.Option(False, "--no-completion-check",
                                             help="skip the one-time completion checklist"),
    thread: str | None = typer.Option(None, "--thread", help="continue this thread's conversation"),
    strategy: threads.Strategy = typer.Option(threads.Strategy.inject, "--strategy",
                                              help="while the thread has an active run"),
    output_schema: str | None = typer.Option(
        None, "--output-schema", help="a JSON Schema the answer must fit: inline JSON or a file"),
) -> None:
    """Run an agent and render it live: thinking, tool calls, the streamed answer, a footer."""
    req = build_request(query, model, tools, mode, max_iterations, not no_completion_check,
                        output_schema)
    req = threads.with_thread(req, thread, strategy)
    if thread and local:
        fail("--thread needs Redis and workers: it cannot be combined with --local")
    s = with_model(settings())
    try:
        code = run_in_process(req, s, as_json) if local else run_distributed(req, s, as_json)
    except ConfigError as exc:
        fail(str(exc))
    raise typer.Exit(code)


def watch(
    run_id: str = typer.Argument(..., help=RUN_ID_HELP),
    as_json: bool = typer.Option(False, "--json", help="print raw events as JSON lines"),
    after: str | None = typer.Option(None, "--after", help="start after this stream id"),
) -> None:
    """Follow a run's events (from the start, or after a stream id) until it ends."""
    from reactq.dispatcher.cli.checks import after_problem

    if why := after_problem(after):
        fail(why)
    handle = handle_for(run_id)
    try:
        code = follow(handle, as_json=as_json, after=after)
    except KeyboardInterrupt:
        err.print(f"\nstopped watching; run {run_id} goes on")
        code = EXIT_INTERRUPTED
    raise typer.Exit(code)


def interrupt(
    run_id: str = typer.Argument(..., help=RUN_ID_HELP),
    text: str = typer.Argument(..., help="the message, taken in as a user interrupt"),
    as_json: bool = typer.Option(False, "--json", help="print {run_id, interrupt_id} as JSON"),
) -> None:
    """Send the run a message; it is taken in at the run's next drain point."""
    handle = handle_for(run_id)
    try:
        msg_id = handle.interrupt(text)
    except RequestError as exc:
        # An ended run cannot take it (1, like a run that did not succeed); bad text is usage (2).
        fail(str(exc), EXIT_FAILED if exc.field == "run_id" else EXIT_USAGE)
    if as_json:
        print_json({"run_id": run_id, "interrupt_id": msg_id})
    else:
        out.print(msg_id)


def cancel(
    run_id: str = typer.Argument(..., help=RUN_ID_HELP),
    wait: bool = typer.Option(False, "--wait", help="wait until the run has ended"),
    as_json: bool = typer.Option(False, "--json", help="print {run_id, status} as JSON"),
) -> None:
    """Ask a run to stop at its next step boundary (it ends 'cancelled'); 0 also when it had
    already ended (nothing to cancel)."""

    handle = handle_for(run_id)
    before = handle.status()["status"]
    if before in TERMINAL_STATUSES:
        err.print(f"run {run_id} has already ended ({before}): nothing to cancel")
    else:
        handle.cancel()
    final = handle.result(timeout=None)["status"] if wait and before not in TERMINAL_STATUSES else None
    now = final or handle.status()["status"]
    if as_json:
        print_json({"run_id": run_id, "status": now})
    elif before not in TERMINAL_STATUSES:
        out.print(f"run {run_id} {final}" if final else f"cancel requested for run {run_id}")
    raise typer.Exit(EXIT_OK)


def status(
    run_id: str = typer.Argument(..., help=RUN_ID_HELP),
    as_json: bool = typer.Option(False, "--json", help="print the status as JSON"),
) -> None:
    """A run's status and, once it ended, its result."""
    st = handle_for(run_id).status()
    if as_json:
        print_json(st)
        return
    from reactq.dispatcher.cli.render import fmt_tokens, one_line

    table = Table(show_header=False, box=None)
    table.add_row("run", st["run_id"])
    table.add_row("status", st["status"])
    table.add_row("events", str(st["events"]))
    res = st.get("result")
    if res:
        table.add_row("iterations", str(res.get("iterations")))
        table.add_row("tokens", fmt_tokens(res.get("usage")))
        table.add_row("elapsed", f"{res.get('elapsed')}s")
        if res.get("error"):
            table.add_row("error", one_line(str(res["error"]), 200))
        table.add_row("answer", one_line(str(res.get("answer") or ""), 500))
    out.print(table)
