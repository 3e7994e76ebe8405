"""The ``reactq`` command line (typer + rich).

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

import asyncio
import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Optional

import redis.exceptions
import typer
from pydantic import ValidationError
from reactq.shared.errors import ConfigError, LocalServiceError, RequestError, RunNotFound
from reactq.shared.settings import Settings
from rich.console import Console
from rich.table import Table

from reactq.dispatcher import threads_cli

if TYPE_CHECKING:
    from reactq.dispatcher.client import Dispatcher, RunHandle
    from reactq.shared.events import Event
    from reactq.shared.requests import RunRequest

app = typer.Typer(name="reactq", help="ReAct agents as durable, distributed jobs on Celery and Redis.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_show_locals=False)
out = Console(highlight=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class Mode(str, Enum):
    auto = "auto"
    json = "json"
    native = "native"


# ----------------------------------------------------------------------------- helpers


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    err.print(f"[red]error:[/] {message}", markup=True, highlight=False)
    raise typer.Exit(code)


def validation_message(exc: ValidationError) -> str:
    """Each bad field with pydantic's message, which states the limit."""
    from reactq.dispatcher.batch import format_validation

    return format_validation(exc)


def settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        fail(f"bad configuration: {validation_message(exc)}")


def with_model(s: Settings) -> Settings:
    """A configured model, else the bundled local one (started once, shared), else exit 2
    saying what to set or install (``reactq.dispatcher.localmodel``)."""
    from reactq.dispatcher.localmodel import resolve_model

    try:
        return resolve_model(s)
    except ConfigError as exc:
        fail(str(exc))
    except RuntimeError as exc:  # the local server would not start
        fail(f"the local model did not start: {exc}", EXIT_FAILED)


def dispatcher(s: Settings | None = None) -> Dispatcher:
    from reactq.dispatcher.client import Dispatcher

    return Dispatcher(s or settings())


def handle_for(run_id: str) -> RunHandle:
    from reactq.dispatcher.cli_checks import id_problem

    if why := id_problem(run_id, "RUN_ID"):
        fail(why)
    try:
        return dispatcher().handle(run_id)
    except RunNotFound as exc:
        fail(str(exc))


def exit_code_for(status: str | None) -> int:
    return EXIT_OK if status == "succeeded" else EXIT_FAILED


def print_json_event(stream_id: str | None, event: Event) -> None:
    from reactq.dispatcher.render import json_line

    print(json_line(stream_id, event), flush=True)


def build_request(query: str, model: str | None, tools: str | None, mode: Mode,
                  max_iterations: int | None, completion_check: bool) -> RunRequest:
    """Options → a validated ``RunRequest`` (exit 2 naming the field otherwise)."""
    from reactq.shared.requests import RunRequest

    fields: dict[str, Any] = {"query": query, "mode": mode.value, "completion_check": completion_check}
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


# ----------------------------------------------------------------------------- run / watch


def follow(handle: RunHandle, *, as_json: bool, after: str | None = None) -> int:
    """Stream a run's events to the terminal until ``done``; returns the exit code."""
    from reactq.dispatcher.render import RunRenderer

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


def ensure_local_workers(s: Settings, d: Dispatcher) -> None:
    """No worker answers ⇒ start one here (the embedded default: works on a fresh machine)."""
    from reactq.dispatcher.local import ensure_local_workers as ensure

    try:
        ensure(s, d.celery, err)
    except LocalServiceError as exc:
        fail(str(exc), EXIT_FAILED)


def run_distributed(req: RunRequest, s: Settings, as_json: bool) -> int:
    d = dispatcher(s)
    try:
        d.validate(req)
    except RequestError as exc:
        fail(f"invalid request: {exc}")
    ensure_local_workers(s, d)
    handle = threads_cli.submit(d, req)
    err.print(f"[dim]run {handle.run_id} · watch: reactq watch {handle.run_id}[/]")
    try:
        return follow(handle, as_json=as_json)
    except KeyboardInterrupt:
        ask_what_to_do(handle)
        return EXIT_INTERRUPTED


def run_in_process(req: RunRequest, s: Settings, as_json: bool) -> int:
    """``--local``: the in-process shell, same engine and events, no Redis and no workers."""
    from reactq.dispatcher.render import RunRenderer
    from reactq.shared.engine.context import ContextGuard
    from reactq.shared.engine.steps import EngineDeps
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
    llm = models.get(req.model) if req.model else models.get_default()
    fast = models.resolve("fast")
    config = EngineConfig()
    guard = ContextGuard(config.context_budget, llm=fast, max_message_chars=config.max_message_chars,
                         keep_recent=config.keep_recent)
    deps = EngineDeps(llm=llm, registry=tools, hooks=default_hooks(s), config=config, guard=guard,
                      selection_llm=fast)
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


@app.command()
def run(
    query: str = typer.Argument(..., help="the question"),
    model: str | None = typer.Option(None, "--model", "-m", help="a model name from the registry"),
    tools: str | None = typer.Option(None, "--tools", "-t", help="comma-separated tool allowlist"),
    mode: Mode = typer.Option(Mode.auto, "--mode", help="tool-loop mode"),
    as_json: bool = typer.Option(False, "--json", help="print raw events as JSON lines"),
    local: bool = typer.Option(False, "--local", help="run in this process (no Redis, no workers)"),
    max_iterations: int | None = typer.Option(None, "--max-iterations", help="loop limit (1..200)"),
    no_completion_check: bool = typer.Option(False, "--no-completion-check",
                                             help="skip the one-time completion checklist"),
    thread: str | None = typer.Option(None, "--thread", help="continue this thread's conversation"),
    strategy: threads_cli.Strategy = typer.Option(threads_cli.Strategy.inject, "--strategy",
                                                  help="while the thread has an active run"),
) -> None:
    """Run an agent and render it live: thinking, tool calls, the streamed answer, a footer."""
    req = build_request(query, model, tools, mode, max_iterations, not no_completion_check)
    req = threads_cli.with_thread(req, thread, strategy)
    if thread and local:
        fail("--thread needs Redis and workers: it cannot be combined with --local")
    s = with_model(settings())
    try:
        code = run_in_process(req, s, as_json) if local else run_distributed(req, s, as_json)
    except ConfigError as exc:
        fail(str(exc))
    raise typer.Exit(code)


@app.command()
def watch(
    run_id: str = typer.Argument(..., help="the run to watch"),
    as_json: bool = typer.Option(False, "--json", help="print raw events as JSON lines"),
    after: str | None = typer.Option(None, "--after", help="start after this stream id"),
) -> None:
    """Follow a run's events (from the start, or after a stream id) until it ends."""
    from reactq.dispatcher.cli_checks import after_problem

    if why := after_problem(after):
        fail(why)
    handle = handle_for(run_id)
    try:
        code = follow(handle, as_json=as_json, after=after)
    except KeyboardInterrupt:
        err.print(f"\nstopped watching; run {run_id} goes on")
        code = EXIT_INTERRUPTED
    raise typer.Exit(code)


@app.command()
def interrupt(run_id: str = typer.Argument(...), text: str = typer.Argument(..., help="the message")) -> None:
    """Send the run a message; it is taken in at the run's next drain point."""
    handle = handle_for(run_id)
    try:
        msg_id = handle.interrupt(text)
    except RequestError as exc:
        fail(str(exc), EXIT_FAILED if exc.field == "run_id" else EXIT_USAGE)
    out.print(msg_id)


@app.command()
def cancel(
    run_id: str = typer.Argument(...),
    wait: bool = typer.Option(False, "--wait", help="wait until the run has ended"),
) -> None:
    """Ask a run to stop at its next step boundary (it ends 'cancelled')."""
    handle = handle_for(run_id)
    status = handle.status()["status"]
    if status in ("succeeded", "failed", "cancelled"):
        err.print(f"run {run_id} has already ended ({status})")
        raise typer.Exit(EXIT_OK)
    handle.cancel()
    if wait:
        status = handle.result(timeout=None)["status"]
        out.print(f"run {run_id} {status}")
    else:
        out.print(f"cancel requested for run {run_id}")


@app.command()
def status(
    run_id: str = typer.Argument(...),
    as_json: bool = typer.Option(False, "--json", help="print the status as JSON"),
) -> None:
    """A run's status and, once it ended, its result."""
    st = handle_for(run_id).status()
    if as_json:
        print(json.dumps(st, ensure_ascii=False))
        return
    from reactq.dispatcher.render import fmt_tokens, one_line

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


# ----------------------------------------------------------------------------- batch / dag


@app.command()
def batch(
    input_file: Path = typer.Argument(..., exists=True, dir_okay=False, readable=True,
                                      help="JSONL: one RunRequest (optionally with an id) per line"),
    output: Path = typer.Option(..., "--output", "-o", help="JSONL results (appended; resumable)"),
    concurrency: int = typer.Option(8, "--concurrency", "-c", min=1, max=1000, help="runs in flight"),
    token_budget: Optional[int] = typer.Option(None, "--token-budget", min=1,
                                               help="stop starting lines once the batch's runs used this many tokens"),
) -> None:
    """Run every line of a JSONL file; rerun with the same output file to resume."""
    from reactq.dispatcher.batch import run_file_batch
    from reactq.dispatcher.cli_checks import input_file_problem, output_file_problem

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


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
             add_help_option=False)
def dag(ctx: typer.Context) -> None:
    """Run a DAG: 'reactq dag PLAN.json' or 'reactq dag --goal TEXT'."""
    # Imported here: the DAG command lives in its own module and is only loaded when used.
    from reactq.dispatcher import dag_cli

    sub = typer.Typer(add_completion=False, pretty_exceptions_show_locals=False)
    sub.command()(dag_cli.dag)
    typer.main.get_command(sub).main(args=ctx.args, prog_name="reactq dag")


# ----------------------------------------------------------------------------- processes


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="interface to listen on"),
    port: int = typer.Option(8000, "--port", help="port"),
    log_level: str = typer.Option("info", "--log-level"),
    start_workers: bool = typer.Option(False, "--start-workers",
                                       help="start a local worker when none is running"),
) -> None:
    """The HTTP + SSE gateway (uvicorn)."""
    import uvicorn

    s = with_model(settings())
    if start_workers:
        ensure_local_workers(s, dispatcher(s))
    if not s.redis_url:
        # Resolve the embedded server once, here, so the app and its threads share it.
        from reactq.shared.redisconn import redis_url

        os.environ["REACTQ_REDIS_URL"] = redis_url(s)
    from reactq.dispatcher.viewer import viewer_url

    typer.echo(f"Viewer: {viewer_url(host, port)}", err=True)
    uvicorn.run("reactq.dispatcher.http:create_app", factory=True, host=host, port=port, log_level=log_level)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def worker(
    ctx: typer.Context,
    queues: str = typer.Option("reactq.runs,reactq.tools", "--queues", "-Q", help="queues to consume"),
    pool: str = typer.Option("threads", "--pool", "-P", help="celery pool (threads, prefork, …)"),
    concurrency: int = typer.Option(8, "--concurrency", "-c", min=1),
    name: str = typer.Option("reactq@%h", "--name", "-n", help="worker node name"),
) -> None:
    """A Celery worker with reactq's queues ('celery -A reactq.workers.app worker'; extra args pass through)."""
    # Threads by default: a step mostly waits on the LLM or a tool, not on the CPU.
    from reactq.dispatcher.local import worker_command
    from reactq.shared.redisconn import redis_url

    s = with_model(settings())
    env = dict(os.environ)  # carries REACTQ_MODELS when the local model was chosen
    env["REACTQ_REDIS_URL"] = redis_url(s)  # the embedded server's URL when none is set
    cmd = worker_command(queues=queues, pool=pool, concurrency=concurrency, name=name) + list(ctx.args)
    # exec: signals (Ctrl-C, SIGTERM from a supervisor) reach Celery directly.
    os.execve(cmd[0], cmd, env)


@app.command()
def down() -> None:
    """Stop the local workers 'reactq run' started and the embedded Valkey server."""
    from reactq.dispatcher.local import stop_workers

    from reactq.dispatcher.localmodel import stop_shared_server

    s = settings()
    n = stop_workers(s)
    embedded = "" if s.redis_url else " and the embedded server"
    model = " and the local model server" if stop_shared_server(s) else ""
    out.print(f"stopped {n} local worker(s){embedded}{model}")


# ----------------------------------------------------------------------------- catalogs


@app.command()
def models(as_json: bool = typer.Option(False, "--json")) -> None:
    """The model registry (no secrets)."""
    from reactq.shared.llm.registry import load_registry

    try:
        specs = load_registry(settings()).specs()
    except ConfigError as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps([sp.model_dump(mode="json") for sp in specs], ensure_ascii=False))
        return
    from reactq.dispatcher.flow_cli import limits_cell, use_of

    use = use_of([sp.name for sp in specs])
    table = Table("name", "model", "roles", "abilities", "base url", "limits (rpm / tpm / conc)", "use (60 s)")
    for sp in specs:
        table.add_row(sp.name, sp.model, ", ".join(sp.roles),
                      ", ".join(k for k, v in sp.abilities.items() if v), sp.base_url or "",
                      limits_cell(sp), use.get(sp.name, "-"))
    out.print(table)


@app.command()
def tools(as_json: bool = typer.Option(False, "--json")) -> None:
    """The tools runs can use (built-ins + REACTQ_MCP servers + REACTQ_TOOLS)."""
    from reactq.shared.tools.loader import default_registry

    try:
        reg = default_registry(settings())
    except ConfigError as exc:
        fail(str(exc))
    rows = [{"name": t.name, "description": t.description, "idempotent": t.idempotent,
             "parameters": t.parameters()} for t in reg]
    if as_json:
        print(json.dumps(rows, ensure_ascii=False))
        return
    table = Table("name", "description", "idempotent")
    for row in rows:
        table.add_row(row["name"], row["description"].splitlines()[0] if row["description"] else "",
                      "yes" if row["idempotent"] else "no")
    out.print(table)


app.command("thread")(threads_cli.thread)

from reactq.dispatcher.flow_cli import batch_cancel  # noqa: E402  (flow control: issue 13)

app.command("batch-cancel")(batch_cancel)


def main() -> None:
    try:
        app()
    except redis.exceptions.ConnectionError as exc:
        # Not a usage error and not a failed run: the infrastructure is not there.
        err.print(f"[red]error:[/] cannot reach Redis ({exc}); is REACTQ_REDIS_URL right?")
        sys.exit(EXIT_FAILED)


if __name__ == "__main__":
    main()
