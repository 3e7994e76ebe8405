"""Threads on the command line: ``reactq run --thread ID [--strategy S]`` and
``reactq thread ID`` (the conversation, then the thread's runs).

Exit codes as for the other commands: 0 shown, 1 the thread is busy (``--strategy reject``),
2 bad usage or a thread id that names nothing.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import TYPE_CHECKING, Any

import typer
from pydantic import ValidationError

from reactq.dispatcher.cli.common import (EXIT_FAILED, dispatcher, err, fail, out, settings, validation_message,
                                          whole_ids)

if TYPE_CHECKING:
    from reactq.dispatcher.client import Dispatcher, RunHandle
    from reactq.shared.requests import RunRequest


class Strategy(str, Enum):
    inject = "inject"
    enqueue = "enqueue"
    reject = "reject"
    interrupt = "interrupt"
    rollback = "rollback"


def with_thread(req: RunRequest, thread_id: str | None, strategy: Strategy) -> RunRequest:
    """The request on ``thread_id`` (validated: exit 2 naming the field)."""
    from reactq.shared.requests import RunRequest

    if thread_id is None:
        return req
    try:
        return RunRequest.model_validate({**req.model_dump(exclude_unset=True), "thread_id": thread_id,
                                          "multitask_strategy": strategy.value})
    except ValidationError as exc:
        fail(f"invalid request: {validation_message(exc)}")


def submit(d: Dispatcher, req: RunRequest) -> RunHandle:
    """Submit; a busy thread (reject) exits 1; an injected query says which run took it."""
    from reactq.dispatcher.threads import ThreadBusy

    try:
        handle = d.submit(req)
    except ThreadBusy as exc:
        fail(str(exc), EXIT_FAILED)
    if handle.injected:
        err.print(f"[dim]sent into run {handle.run_id} (the active run of thread {req.thread_id}) "
                      f"as a follow-up, interrupt {handle.interrupt_id}[/]")
    return handle


def thread(
    thread_id: str = typer.Argument(..., help="the thread id (as given to run --thread)"),
    as_json: bool = typer.Option(False, "--json", help="print the thread as JSON"),
) -> None:
    """A thread: its conversation so far, then its runs (oldest first)."""
    import re

    from reactq.dispatcher.threads import thread_view
    from reactq.shared.requests import THREAD_ID_PATTERN

    if len(thread_id) > 200 or not re.match(THREAD_ID_PATTERN, thread_id):
        fail("thread_id: 1..200 characters of A-Z a-z 0-9 . _ : -")
    view = thread_view(dispatcher(settings()), thread_id)
    if view is None:
        fail(f"no thread with id {thread_id!r} (it may have expired)")
    if as_json:
        print(json.dumps(view, ensure_ascii=False))
        return
    _render(out, view)


def _render(out: Any, view: dict[str, Any]) -> None:
    from rich.markup import escape
    from rich.table import Table

    for m in view["messages"]:
        who = "[bold cyan]user[/]" if m["role"] == "user" else "[bold green]assistant[/]"
        out.print(f"{who}  {escape(str(m.get('content') or ''))}")
    table = Table("run", "status", "query", title=f"thread {view['thread_id']}")
    for r in view["runs"]:
        mark = " (active)" if r["run_id"] == view["active_run"] else ""
        query = r["query"] if len(r["query"]) <= 80 else r["query"][:79] + "…"
        table.add_row(r["run_id"] + mark, r["status"], escape(query))
    out.print(whole_ids(table, "run"))
