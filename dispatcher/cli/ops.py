"""``reactq serve | worker | scheduler | down`` (the processes) and ``reactq models | tools`` (the
catalogs: the model registry with each model's limits and use, the tools runs can use)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from typing import Any

import typer
from rich.table import Table

from reactq.dispatcher.cli.common import dispatcher, ensure_local_workers, fail, local, out, settings, with_model
from reactq.shared.settings import Settings, child_env
from reactq.shared.errors import ConfigError
from reactq.shared.wire import DEFAULT_QUEUES


def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="interface to listen on"),
    port: int = typer.Option(8000, "--port", help="port to listen on"),
    log_level: str = typer.Option("info", "--log-level", help="uvicorn's log level (debug, info, warning, …)"),
    start_workers: bool = typer.Option(False, "--start-workers",
                                       help="start a local worker when none is running"),
) -> None:
    """The HTTP + SSE gateway (uvicorn)."""
    import uvicorn

    # Nothing configured: the embedded server, resolved once here (and exported), so the app
    # and its threads share it.
    s = local(with_model(settings()))
    if start_workers:
        ensure_local_workers(s, dispatcher(s))
    from reactq.dispatcher.http import create_app
    from reactq.dispatcher.local.viewer import viewer_url

    typer.echo(f"Viewer: {viewer_url(host, port)}", err=True)
    uvicorn.run(create_app(s), host=host, port=port, log_level=log_level)


def worker(
    ctx: typer.Context,
    queues: str = typer.Option(DEFAULT_QUEUES, "--queues", "-Q", help="queues to consume"),
    pool: str = typer.Option("threads", "--pool", "-P", help="celery pool (threads, prefork, …)"),
    concurrency: int = typer.Option(8, "--concurrency", "-c", min=1, help="tasks at once (threads)"),
    name: str = typer.Option("reactq@%h", "--name", "-n", help="worker node name"),
) -> None:
    """A Celery worker with reactq's queues ('celery -A reactq.workers.app worker'; extra args pass through)."""
    # Threads by default: a step mostly waits on the LLM or a tool, not on the CPU.
    from reactq.dispatcher.local.workers import worker_command

    s = local(with_model(settings()))  # the embedded server when nothing is configured
    # The local model's registry when it was chosen; the embedded server's URL when none is set.
    env = child_env(s, REACTQ_REDIS_URL=str(s.redis_url))
    cmd = worker_command(queues=queues, pool=pool, concurrency=concurrency, name=name) + list(ctx.args)
    # exec: signals (Ctrl-C, SIGTERM from a supervisor) reach Celery directly.
    os.execve(cmd[0], cmd, env)


def scheduler(
    ctx: typer.Context,
    log_level: str = typer.Option("INFO", "--loglevel", "-l", help="log level (DEBUG, INFO, WARNING, …)"),
) -> None:
    """The scheduler that fires schedules' ticks (Celery beat + celery-redbeat's lock).

    Run two or more for fail-over: one holds the lock, the others stand by. Extra arguments
    go to 'celery beat'."""
    s = local(settings())  # the embedded server when nothing is configured
    env = child_env(s, REACTQ_REDIS_URL=str(s.redis_url))
    cmd = scheduler_command(log_level) + list(ctx.args)
    os.execve(cmd[0], cmd, env)  # signals reach Celery directly


def scheduler_command(log_level: str = "INFO") -> list[str]:
    """The ``celery beat`` command line of ``reactq scheduler``."""
    return [sys.executable, "-m", "celery", "-A", "reactq.workers.scheduler.app", "beat",
            "-S", "reactq.workers.scheduler.beat:ScheduleBeat", "-l", log_level]


def down() -> None:
    """Stop the local workers 'reactq run' started, the embedded Valkey server and the local
    model server; says what it stopped (nothing, when none of them was running)."""
    from reactq.dispatcher.local.workers import stop_workers
    from reactq.dispatcher.local.model import stop_shared_server
    from reactq.shared.redisconn import stop_embedded

    s = settings()
    stopped = []
    if n := stop_workers(s, embedded=False):
        stopped.append(f"{n} local worker(s)")
    if not s.redis_url and stop_embedded(s.data_dir):
        stopped.append("the embedded server")
    if stop_shared_server(s):
        stopped.append("the local model server")
    out.print(f"stopped {' and '.join(stopped)}" if stopped else
              f"nothing to stop: no local worker, embedded server or local model server was running "
              f"(under {s.data_dir})")


def env(as_json: bool = typer.Option(False, "--json", help="print the settings as JSON")) -> None:
    """The Redis and broker URLs this machine's commands use: REACTQ_REDIS_URL, else the
    embedded server (started if needed), as 'export' lines for another shell."""
    from reactq.shared.redisconn import broker_url

    s = local(settings())
    values = {"REACTQ_REDIS_URL": _shown(str(s.redis_url))}
    if s.broker_url:
        values["REACTQ_BROKER_URL"] = _shown(broker_url(s))
    values["REACTQ_DATA_DIR"] = str(s.data_dir)
    if as_json:
        print(json.dumps({**values, "embedded": not settings().redis_url}, ensure_ascii=False))
        return
    for name, value in values.items():
        # A URL with a password is shown without it: a comment, not a line to paste.
        print(f"# {name}={value}  (password hidden)" if ":***@" in value else f"export {name}={value}")


def _shown(url: str) -> str:
    """A URL without its password (``***``): what it names, not how to get in."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if not parts.password:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def models(as_json: bool = typer.Option(False, "--json", help="print the registry as JSON")) -> None:
    """The model registry runs use (no secrets): REACTQ_MODELS, else OPENAI_API_KEY's model,
    else the bundled local model's."""
    from reactq.shared.llm.registry import load_registry

    try:
        specs = load_registry(_models_in_use(settings())).specs()
    except ConfigError as exc:
        fail(str(exc), kind="config_error")
    if as_json:
        print(json.dumps([sp.model_dump(mode="json") for sp in specs], ensure_ascii=False))
        return
    use = use_of([sp.name for sp in specs])
    table = Table("name", "model", "roles", "abilities", "base url", "limits (rpm / tpm / conc)", "use (60 s)")
    for sp in specs:
        table.add_row(sp.name, sp.model, ", ".join(sp.roles),
                      ", ".join(k for k, v in sp.abilities.items() if v), sp.base_url or "",
                      limits_cell(sp), use.get(sp.name, "-"))
    out.print(table)


def _models_in_use(s: Settings) -> Settings:
    """With no model configured, runs use the local model's registry: show that one (it is
    written when the local model first starts), never a default no run would use."""
    from reactq.dispatcher.local.model import REGISTRY_FILE, model_configured

    if model_configured(s):
        return s
    local_registry = s.data_dir / REGISTRY_FILE
    if local_registry.exists():
        return s.model_copy(update={"models": local_registry})
    fail("no model is configured: set OPENAI_API_KEY (and REACTQ_MODEL), or REACTQ_MODELS; without them "
         "runs use the bundled local model, whose registry is written when it first starts "
         "(reactq run). See the docs' 'Configure a model'.", kind="config_error")


def tools(as_json: bool = typer.Option(False, "--json", help="print the tools as JSON")) -> None:
    """The tools runs can use (built-ins + REACTQ_MCP servers + REACTQ_TOOLS)."""
    from reactq.shared.tools.loader import default_registry

    try:
        reg = default_registry(settings())
    except ConfigError as exc:
        fail(str(exc))
    rows: list[dict[str, Any]] = [{"name": t.name, "description": t.description, "idempotent": t.idempotent,
                                   "parameters": t.parameters()} for t in reg]
    if as_json:
        print(json.dumps(rows, ensure_ascii=False))
        return
    table = Table("name", "description", "idempotent")
    for row in rows:
        table.add_row(row["name"], row["description"].splitlines()[0] if row["description"] else "",
                      "yes" if row["idempotent"] else "no")
    out.print(table)


# -- a model's limits and use (flow control) ----------------------------------------------------

def limits_cell(spec: object) -> str:
    vals = [getattr(spec, k, None) for k in ("rpm", "tpm", "max_concurrency")]
    return " / ".join(f"{v:,}" if v else "-" for v in vals) if any(vals) else "none"


def use_of(names: list[str]) -> dict[str, str]:
    """``rpm used / tpm used / in flight`` per model from Redis; empty when it is unreachable."""
    import redis as redis_lib

    from reactq.shared.stores.flow import FlowLimiter

    s = settings()
    if not s.redis_url and not _embedded_running(s.data_dir):
        return {}  # showing the registry must not start the embedded server
    try:
        d = dispatcher(s)
        limiter = FlowLimiter(d.redis, d.keys)
        cells = {}
        for name in names:
            u = limiter.usage(name)
            waiting = sum(u["waiting"].values())
            cell = f"{u['rpm_used']} req, {u['tpm_used']:,} tok, {u['in_flight']} in flight"
            if waiting:
                cell += f", {waiting} waiting"
            if u["paused_for_s"]:
                cell += f", paused {u['paused_for_s']:.1f}s"
            cells[name] = cell
        return cells
    except (redis_lib.RedisError, OSError):
        return {}


def _embedded_running(data_dir: Path) -> bool:
    from reactq.shared.redisconn import _ping

    try:
        return _ping(int(json.loads((data_dir / "valkey.json").read_text())["port"]))
    except (OSError, ValueError, KeyError):
        return False
