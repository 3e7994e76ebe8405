"""``reactq dag PLAN.json | --goal TEXT``: submit a DAG and watch its steps live.

PLAN.json is either a ``DagRequest`` object (``{"goal": …, "steps": [{id, task,
dependencies, tool_hint, model_hint}, …], …}``) or just the list of steps (then ``--goal``
is required). ``--goal`` alone lets the planner make the steps. Options on the command line
override the file.

On a terminal the steps are a table that updates as they start and finish (status, model,
child run, time, result), then the answer and a footer. ``--json`` prints the DAG's raw
events instead, one ``{"id", "event", "data"}`` object per line.

Exit codes: 0 the DAG finished (``succeeded``; the footer says whether the goal was
achieved), 1 it failed or was cancelled, 2 bad usage (including a plan refused at the door,
e.g. a cycle), 130 interrupted (the DAG keeps running).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from reactq.dispatcher.cli.common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, ensure_local_workers
from reactq.dispatcher.cli.render import json_line, one_line
from reactq.shared.errors import ConfigError, RequestError, UsageError
from reactq.shared.requests import DagRequest
from reactq.shared.settings import Settings

__all__ = ["UsageError", "dag", "follow_json", "follow_live", "load_request", "steps_table"]

_STATUS_STYLE = {"pending": "dim", "running": "yellow", "completed": "green", "failed": "red",
                 "skipped": "magenta"}


def load_request(plan: Path | None, goal: str | None, *, model: str | None = None,
                 tools: str | None = None, max_concurrency: int | None = None,
                 max_rounds: int | None = None) -> DagRequest:
    """Plan file and options → a validated ``DagRequest``; ``UsageError`` naming the problem."""
    fields: dict[str, Any] = {}
    if plan is not None:
        try:
            data = json.loads(plan.read_text(encoding="utf-8"))
        except OSError as exc:
            raise UsageError(f"cannot read {plan}: {exc.strerror or exc}") from exc
        except ValueError as exc:
            raise UsageError(f"{plan} is not JSON: {exc}") from exc
        if isinstance(data, list):
            fields["steps"] = data
        elif isinstance(data, dict):
            fields.update(data)
        else:
            raise UsageError(f"{plan}: expected a plan object or a list of steps")
    elif goal is None:
        raise UsageError("give a plan file (reactq dag PLAN.json) or a goal (reactq dag --goal TEXT)")
    overrides = {"goal": goal, "model": model, "max_concurrency": max_concurrency,
                 "max_rounds": max_rounds}
    fields.update({k: v for k, v in overrides.items() if v is not None})
    if tools is not None:
        fields["tools"] = [t.strip() for t in tools.split(",") if t.strip()]
    if "goal" not in fields:
        raise UsageError(f"{plan} has no goal: add \"goal\" to the file or pass --goal TEXT")
    try:
        return DagRequest.model_validate(fields)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'plan'}: {e['msg']}"
                             for e in exc.errors(include_url=False))
        raise UsageError(f"invalid plan: {problems}") from exc


def steps_table(status: dict[str, Any], *, now: float | None = None) -> Table:
    """The live view: one row per step of the current round."""
    now = time.time() if now is None else now
    title = (f"DAG {status['dag_id']} · {status['status']} · {status.get('phase') or ''}"
             f" · round {status.get('round') or 0}")
    table = Table(title=escape(title), title_justify="left", expand=False)
    for column in ("step", "status", "model", "run", "time", "task / result"):
        table.add_column(column, overflow="fold" if column == "task / result" else "ellipsis")
    for s in status.get("steps") or []:
        state = s.get("status") or "pending"
        if s.get("duration") is not None:
            took = f"{s['duration']:.1f}s"
        elif s.get("started_at"):
            took = f"{now - s['started_at']:.1f}s"
        else:
            took = ""
        detail = s.get("result") if state in ("completed", "failed", "skipped") else s.get("task")
        table.add_row(escape(str(s["id"])), Text(state, style=_STATUS_STYLE.get(state, "")),
                      escape(s.get("model") or ""), escape((s.get("run_id") or "")[:12]), took,
                      escape(one_line(str(detail or ""), 100)))
    return table


def _footer(result: dict[str, Any]) -> str:
    usage = result.get("usage") or {}
    achieved = "achieved" if result.get("achieved") else "not achieved"
    return (f"{result.get('status')} · goal {achieved} (confidence {result.get('confidence', 0):g})"
            f" · {result.get('rounds')} round(s) · {int(usage.get('total_tokens') or 0):,} tokens"
            f" · {result.get('elapsed')}s")


def follow_live(handle: Any, out: Console) -> dict[str, Any]:
    """Redraw the table on every step or phase event; returns the ``done`` payload."""
    done: dict[str, Any] = {}
    with Live(steps_table(handle.status()), console=out, refresh_per_second=4, transient=False) as live:
        for _, event in handle.events():
            if event.channel in ("phase", "step_progress", "done"):
                live.update(steps_table(handle.status()))
            if event.channel == "done":
                done = event.data
    return done


def follow_json(handle: Any) -> dict[str, Any]:
    done: dict[str, Any] = {}
    for stream_id, event in handle.events():
        print(json_line(stream_id, event), flush=True)
        if event.channel == "done":
            done = event.data
    return done


def dag(
    plan: Optional[Path] = typer.Argument(None, help="plan JSON: a DagRequest or a list of steps"),
    goal: Optional[str] = typer.Option(None, "--goal", help="the goal (alone: the planner plans)"),
    json_out: bool = typer.Option(False, "--json", help="print raw events as JSON lines"),
    model: Optional[str] = typer.Option(None, "--model", help="planner/analyzer/synthesis model"),
    tools: Optional[str] = typer.Option(None, "--tools", help="comma-separated tool allowlist"),
    max_concurrency: Optional[int] = typer.Option(None, "--max-concurrency", help="steps at once (1-50)"),
    max_rounds: Optional[int] = typer.Option(None, "--max-rounds", help="plan/execute/analyze rounds (1-5)"),
) -> None:
    """Run a DAG: 'reactq dag PLAN.json' or 'reactq dag --goal TEXT'."""
    out, err = Console(highlight=False), Console(stderr=True, highlight=False, soft_wrap=True)

    def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
        err.print(f"[red]error:[/] {escape(message)}")
        raise typer.Exit(code)

    try:
        request = load_request(plan, goal, model=model, tools=tools,
                               max_concurrency=max_concurrency, max_rounds=max_rounds)
        from reactq.dispatcher.cli.common import local
        from reactq.dispatcher.dag import DagDispatcher

        settings = local(Settings())
        dags = DagDispatcher(settings)
        dags.validate(request)
    except (UsageError, RequestError, ConfigError) as exc:
        fail(str(exc))
    except ValidationError as exc:
        fail(f"bad configuration: {exc}")
    ensure_local_workers(settings, dags.runs)  # the embedded default has no workers yet
    handle = dags.submit(request)
    err.print(f"[dim]dag {handle.dag_id} · status: GET /v1/dags/{handle.dag_id}[/]")
    try:
        done = follow_json(handle) if json_out else follow_live(handle, out)
    except KeyboardInterrupt:
        _interrupted(handle, err)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if not json_out:
        out.print()
        out.print(done.get("answer") or "", markup=False, highlight=False)
        err.print(f"[dim]{escape(_footer(done))}[/]")
    raise typer.Exit(EXIT_OK if done.get("status") == "succeeded" else EXIT_FAILED)


def _interrupted(handle: Any, err: Console) -> None:
    """Ctrl-C: cancel the DAG if asked on a terminal, else leave it running."""
    if sys.stdin.isatty():
        try:
            if typer.confirm("\nCancel the DAG? (no = leave it running)", default=False, err=True):
                handle.cancel()
                err.print(f"cancel requested for DAG {handle.dag_id}")
                return
        except (KeyboardInterrupt, EOFError, typer.Abort):
            pass
    err.print(f"\nDAG {handle.dag_id} left running; see it with GET /v1/dags/{handle.dag_id}")
