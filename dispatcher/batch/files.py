"""``reactq batch FILE -o OUT``: a JSONL file of runs, one result line per input line.

``ResultFile`` is the output: what an earlier attempt wrote is read back first (a torn last
line, from a kill mid-write, is dropped), so a rerun with the same output file skips the lines
that have a result and re-attaches the ones whose run is still going.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import IO, Any

from reactq.dispatcher.batch.driver import BatchDriver
from reactq.dispatcher.batch.items import BatchItem, Tally, parse_lines


class ResultFile:
    """The output JSONL: read what a previous attempt wrote, then append line by line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.done_ids: set[str] = set()
        self.done_lines: set[int] = set()
        self.previous: Tally = Tally()
        self._fh: IO[str] | None = None

    def load(self) -> None:
        """Collect finished ids; drop a torn last line (a kill in the middle of a write)."""
        if not self.path.exists():
            return
        raw = self.path.read_bytes()
        keep = raw if raw.endswith(b"\n") or not raw else raw[: raw.rfind(b"\n") + 1]
        if keep != raw:
            with self.path.open("r+b") as fh:
                fh.truncate(len(keep))
        for text in keep.decode("utf-8", errors="replace").splitlines():
            try:
                res = json.loads(text)
            except json.JSONDecodeError:
                continue
            if not isinstance(res, dict) or "id" not in res:
                continue
            # An invalid line's id may be another line's (a duplicate): key those by line.
            if res.get("status") == "invalid":
                self.done_lines.add(int(res.get("line") or 0))
            else:
                self.done_ids.add(str(res["id"]))
            self.previous.add(res)

    def is_done(self, item: BatchItem) -> bool:
        if item.request is None:
            return item.line in self.done_lines
        return str(item.id) in self.done_ids

    def append(self, res: dict[str, Any]) -> None:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.path.open("a", encoding="utf-8")
        # One write + flush per result: a kill loses at most the line being written.
        self._fh.write(json.dumps(res, ensure_ascii=False) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def progress_bar(console: Any) -> Any:
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    return Progress(
        SpinnerColumn(), TextColumn("[bold]batch"), BarColumn(), MofNCompleteColumn(),
        TextColumn("[green]✓ {task.fields[ok]}[/] [red]✗ {task.fields[failed]}[/] "
                   "[yellow]! {task.fields[invalid]}[/] [cyan]⟳ {task.fields[running]}[/]"),
        TextColumn("{task.fields[tokens]:,} tok"), TimeElapsedColumn(), TextColumn("ETA"),
        TimeRemainingColumn(), console=console, refresh_per_second=8,
    )


def run_file_batch(input_path: Path, output_path: Path, *, concurrency: int, dispatcher: Any,
                   console: Any, stop: threading.Event | None = None,
                   token_budget: int | None = None) -> tuple[Tally, bool]:
    """``reactq batch``: returns the tally over all lines and whether it was interrupted."""
    source = str(input_path.resolve())
    with input_path.open(encoding="utf-8-sig") as fh:  # a UTF-8 BOM is fine
        items = parse_lines(fh, validate=dispatcher.validate)
    out = ResultFile(output_path)
    out.load()
    todo = [it for it in items if not out.is_done(it)]
    for it in todo:
        if it.error:
            console.print(f"[yellow]invalid[/] {it.error}", highlight=False, markup=True)
    tally = Tally(total=len(items))
    prev = out.previous
    tally.succeeded, tally.failed, tally.invalid, tally.tokens = prev.succeeded, prev.failed, prev.invalid, prev.tokens
    if len(items) > len(todo):
        console.print(f"resuming: {len(items) - len(todo)} of {len(items)} lines already have a result in {output_path}")
    stop = stop or threading.Event()
    interrupted = False
    with progress_bar(console) as bar:
        task = bar.add_task("batch", total=len(items), completed=tally.done, ok=tally.succeeded,
                            failed=tally.failed, invalid=tally.invalid, running=0, tokens=tally.tokens)

        def tick(t: Tally) -> None:
            bar.update(task, completed=t.done, ok=t.succeeded, failed=t.failed, invalid=t.invalid,
                       running=t.running, tokens=t.tokens)

        driver = BatchDriver(dispatcher, source, concurrency, on_result=out.append, on_tick=tick,
                             stop=stop, tally=tally, token_budget=token_budget)
        try:
            driver.run(todo)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            out.close()
            tick(tally)
    return tally, interrupted or stop.is_set()
