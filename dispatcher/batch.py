"""Batch jobs: many runs from a JSONL file (``reactq batch``) or one HTTP request
(``POST /v1/batches``), at most N in flight, one result line per input line.

Input lines are ``RunRequest`` objects, optionally with an ``id`` (a string or an integer;
a line without one gets its 1-based line number as id). A bad line (not JSON, not an
object, a field out of range, an unknown tool…) becomes a result line with status
``invalid`` and an error naming the line and the field; the batch goes on.

Each result line: ``{id, line, run_id, status, answer, iterations, usage, elapsed, error}``.

Resuming. Every run is submitted with an idempotency key derived from where the batch
comes from (the input file's absolute path, or the HTTP batch id), the line's id and the
request itself (an edited line is a new run). A
restarted batch skips lines that already have a result, and a line whose run was submitted
but whose result was never written is *re-attached* to that run (same key → same run id):
no run is paid for twice. A line's own ``idempotency_key``, when it has one, wins.

The driver polls the runs it has in flight (one pipelined ``HMGET`` per tick) rather than
reading their event streams: a batch needs only each run's final result, and a poll every
100 ms costs one round trip however many runs are in flight.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import redis
from pydantic import ValidationError

from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.errors import ConfigError, RequestError
from reactq.shared.inputs import loads_strict
from reactq.shared.keys import Keys
from reactq.shared.requests import RunRequest
from reactq.dispatcher.batch_flow import BatchFlow

log = logging.getLogger(__name__)

POLL_SECONDS = 0.1


# ----------------------------------------------------------------------------- items


@dataclass
class BatchItem:
    """One input line: a valid request, or the reason it is not one."""

    line: int
    id: str | int
    request: RunRequest | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        req = self.request.model_dump(mode="json", exclude_defaults=True) if self.request else None
        return {"line": self.line, "id": self.id, "request": req, "error": self.error}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BatchItem:
        req = RunRequest.model_validate(d["request"]) if d.get("request") is not None else None
        return cls(line=int(d["line"]), id=d["id"], request=req, error=d.get("error"))


def format_validation(exc: ValidationError) -> str:
    """``field: message; field: message`` (the field, then pydantic's words with the limit)."""
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "<request>"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


Validator = Callable[[RunRequest], None]


def parse_obj(obj: Any, line: int, validate: Validator | None = None) -> BatchItem:
    """One decoded input object → a ``BatchItem`` (invalid ones carry their error)."""
    if not isinstance(obj, dict):
        return BatchItem(line, line, error=f"line {line}: expected a JSON object, got {type(obj).__name__}")
    body = dict(obj)
    item_id = body.pop("id", line)
    if isinstance(item_id, bool) or not isinstance(item_id, (str, int)) or item_id == "":
        return BatchItem(line, line, error=f"line {line}: id: must be a non-empty string or an integer")
    body.setdefault("priority", "batch")  # batch lines yield to interactive runs (flow control)
    try:
        req = RunRequest.model_validate(body)
        if validate is not None:
            validate(req)
    except ValidationError as exc:
        return BatchItem(line, item_id, error=f"line {line}: {format_validation(exc)}")
    except RequestError as exc:
        return BatchItem(line, item_id, error=f"line {line}: {exc}")
    return BatchItem(line, item_id, request=req)


def parse_text(text: str, line: int, validate: Validator | None = None) -> BatchItem:
    """One JSONL line; strict JSON (no NaN, no lone surrogates, not nested too deep)."""
    try:
        obj = loads_strict(text, field=None)
    except RequestError as exc:
        return BatchItem(line, line, error=f"line {line}: {str(exc).removeprefix('is ')}")
    return parse_obj(obj, line, validate)


def mark_duplicates(items: list[BatchItem]) -> list[BatchItem]:
    """Two lines with one id would share an idempotency key (one run for both): the later
    one is refused instead of silently answered with the earlier one's result."""
    seen: dict[str, int] = {}
    for it in items:
        if it.error is not None:
            continue
        key = str(it.id)
        if key in seen:
            it.error = f"line {it.line}: id: duplicate id {it.id!r} (first on line {seen[key]})"
            it.request = None
        else:
            seen[key] = it.line
    return items


def parse_lines(lines: Iterable[str], validate: Validator | None = None) -> list[BatchItem]:
    """JSONL → items; blank lines are skipped (but still counted for line numbers)."""
    items = [parse_text(text, n, validate) for n, text in enumerate(lines, start=1) if text.strip()]
    return mark_duplicates(items)


# ----------------------------------------------------------------------------- results


def invalid_result(item: BatchItem) -> dict[str, Any]:
    return {"id": item.id, "line": item.line, "run_id": None, "status": "invalid", "answer": None,
            "iterations": 0, "usage": None, "elapsed": 0.0, "error": item.error}


def run_result(item: BatchItem, run_id: str, result: dict[str, Any] | None, status: str) -> dict[str, Any]:
    res = result or {}
    return {"id": item.id, "line": item.line, "run_id": run_id, "status": res.get("status", status),
            "answer": res.get("answer"), "iterations": res.get("iterations", 0),
            "usage": res.get("usage"), "elapsed": res.get("elapsed", 0.0),
            "error": res.get("error") or (None if result else f"run {run_id} expired before its result was read")}


@dataclass
class Tally:
    """Counts shown by the progress bar and returned at the end."""

    total: int = 0
    succeeded: int = 0
    failed: int = 0
    invalid: int = 0
    running: int = 0
    tokens: int = 0
    skipped: int = 0
    """Lines not started because the batch's token budget was reached or it was cancelled."""
    stopped: str | None = None
    """Why lines were skipped (``token budget …`` / ``cancelled``), for the summary."""

    @property
    def done(self) -> int:
        return self.succeeded + self.failed + self.invalid + self.skipped

    def add(self, res: dict[str, Any]) -> None:
        st = res.get("status")
        if st == "succeeded":
            self.succeeded += 1
        elif st == "invalid":
            self.invalid += 1
        elif st == "skipped":
            self.skipped += 1
        else:
            self.failed += 1
        self.tokens += int((res.get("usage") or {}).get("total_tokens") or 0)


def idem_key(source: str, item_id: str | int, request: RunRequest) -> str:
    """The idempotency key of one line: a hash of where the batch comes from, the line id
    and the request itself — so a line edited between two attempts is a new run, not the
    old line's answer handed back."""
    body = request.model_dump_json(exclude={"idempotency_key"})
    digest = hashlib.sha256(f"{source}\0{item_id}\0{body}".encode()).hexdigest()[:40]
    return f"batch:{digest}"


# ----------------------------------------------------------------------------- driver


@dataclass
class BatchDriver:
    """Submits items with at most ``concurrency`` in flight and reports each result.

    ``stop`` (set by Ctrl-C handling or gateway shutdown) stops submitting; runs already in
    flight are left running, to be re-attached by the next attempt.
    """

    dispatcher: Any
    source: str
    concurrency: int
    on_result: Callable[[dict[str, Any]], None]
    on_tick: Callable[[Tally], None] | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    tally: Tally = field(default_factory=Tally)
    poll: float = POLL_SECONDS
    batch_id: str | None = None  # an HTTP batch: its runs are indexed under it
    token_budget: int | None = None
    """The batch's cap on its runs' spend; reached ⇒ lines not started end ``skipped``."""
    cancelled: Callable[[], bool] | None = None
    """Polled each tick: True ⇒ cancel the runs in flight and skip the lines not started."""
    flow: BatchFlow = field(default_factory=lambda: BatchFlow())

    def run(self, items: Iterable[BatchItem]) -> Tally:
        queue = deque(items)
        inflight: dict[str, BatchItem] = {}
        self.flow.spent_done = self.tally.tokens
        while (queue or inflight) and not self.stop.is_set():
            self.flow.check(self, queue, inflight)
            self._fill(queue, inflight)
            self.tally.running = len(inflight)
            finished = self._poll(inflight)
            for run_id, result, status in finished:
                self._report(run_result(inflight.pop(run_id), run_id, result, status))
            self.tally.running = len(inflight)
            if self.on_tick is not None:
                self.on_tick(self.tally)
            if not finished and (inflight or queue):
                self.stop.wait(self.poll)
        return self.tally

    def _report(self, res: dict[str, Any]) -> None:
        self.tally.add(res)
        self.on_result(res)

    def _fill(self, queue: deque[BatchItem], inflight: dict[str, BatchItem]) -> None:
        while queue and len(inflight) < self.concurrency and not self.stop.is_set():
            item = queue.popleft()
            if item.request is None:
                self._report(invalid_result(item))
                continue
            req = item.request
            if req.idempotency_key is None:
                req = req.model_copy(update={"idempotency_key": idem_key(self.source, item.id, req)})
            try:
                handle = (self.dispatcher.submit(req, batch_id=self.batch_id) if self.batch_id
                          else self.dispatcher.submit(req))
            except ValidationError as exc:
                item.error = f"line {item.line}: {format_validation(exc)}"
                self._report(invalid_result(item))
                continue
            except RequestError as exc:
                item.error = f"line {item.line}: {exc}"
                self._report(invalid_result(item))
                continue
            if handle.run_id in inflight:  # two lines with one explicit idempotency_key
                other = inflight[handle.run_id].line
                item.error = f"line {item.line}: idempotency_key: the same run as line {other}"
                self._report(invalid_result(item))
                continue
            if not handle.created:
                self._repair(handle.run_id, req)
            inflight[handle.run_id] = item

    def _repair(self, run_id: str, req: RunRequest) -> None:
        """Re-attaching to a run an earlier attempt submitted: make sure it will finish.

        That attempt may have been killed half-way through ``submit``: after taking the
        idempotency key but before storing the run (no run hash: store it now), or after
        storing it but before enqueueing its first step (still ``queued``: enqueue it
        again). Enqueueing twice is harmless: a step already taken is a no-op for the
        workers and a step in progress holds a lease.
        """
        from reactq.workers.config import ITERATE

        d = self.dispatcher
        raw = d.redis.hget(d.keys.run(run_id), "status")
        if raw is None:
            log.warning("run %s was never stored (an earlier attempt died in submit); storing it", run_id)
            d.store.create(run_id, req.model_dump(mode="json"), batch_id=self.batch_id)
        elif raw != b"queued":
            return
        d.send(ITERATE, [run_id, 0])

    def _poll(self, inflight: dict[str, BatchItem]) -> list[tuple[str, dict[str, Any] | None, str]]:
        """Runs that ended since the last tick: ``(run_id, result, status)``."""
        if not inflight:
            return []
        d = self.dispatcher
        pipe = d.redis.pipeline(transaction=False)
        ids = list(inflight)
        for rid in ids:
            pipe.hmget(d.keys.run(rid), "status", "result")
        out = []
        for rid, (status, result) in zip(ids, pipe.execute(), strict=True):
            if status is None:  # expired (or deleted) before we saw it end
                out.append((rid, None, "failed"))
                continue
            st = status.decode()
            if st in TERMINAL_STATUSES and result is not None:
                out.append((rid, json.loads(result), st))
        if self.token_budget is not None:
            self.flow.read_spend(d, ids, {rid for rid, _, _ in out})
        return out


# ----------------------------------------------------------------------------- file batches


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


# ----------------------------------------------------------------------------- HTTP batches


class BatchStore:
    """HTTP batches in Redis, all under ``reactq:batch:{id}`` (a hash):
    ``status`` (running/done), ``total``, ``concurrency``, ``created_at``, ``updated_at``,
    ``running``, ``items`` (JSON), one ``result:{line}`` field per finished line.
    ``reactq:batch:{id}:driver`` is the driving gateway's lease (SET NX PX), so a batch whose
    gateway died is picked up by the next gateway that starts."""

    LEASE_MS = 15_000

    def __init__(self, r: redis.Redis, keys: Keys, ttl_seconds: int) -> None:
        self.r = r
        self.keys = keys
        self.ttl = ttl_seconds

    def create(self, items: list[BatchItem], concurrency: int, token_budget: int | None = None) -> str:
        batch_id = uuid.uuid4().hex
        now = f"{time.time():.6f}"
        self.r.hset(self.keys.batch(batch_id), mapping={
            "status": "running", "total": len(items), "concurrency": concurrency, "running": 0,
            "created_at": now, "updated_at": now,
            "items": json.dumps([it.to_dict() for it in items], ensure_ascii=False),
            **({"token_budget": token_budget} if token_budget is not None else {}),
        })
        return batch_id

    def token_budget(self, batch_id: str) -> int | None:
        raw = self.r.hget(self.keys.batch(batch_id), "token_budget")
        return int(raw) if raw else None

    def request_cancel(self, batch_id: str) -> bool:
        """Mark the batch cancelled (its driver cancels the runs, skips the rest); False if unknown."""
        if not self.exists(batch_id):
            return False
        self.r.hset(self.keys.batch(batch_id), "cancel", "1")
        return True

    def cancel_requested(self, batch_id: str) -> bool:
        return self.r.hget(self.keys.batch(batch_id), "cancel") == b"1"

    def exists(self, batch_id: str) -> bool:
        return bool(self.r.exists(self.keys.batch(batch_id)))

    def items(self, batch_id: str) -> tuple[list[BatchItem], int, set[int]]:
        """(items, concurrency, lines that already have a result)."""
        raw = self.r.hgetall(self.keys.batch(batch_id))
        f = {k.decode(): v for k, v in raw.items()}
        items = [BatchItem.from_dict(x) for x in json.loads(f["items"])]
        done = {int(k.split(":", 1)[1]) for k in f if k.startswith("result:")}
        return items, int(f.get("concurrency", b"8")), done

    def add_result(self, batch_id: str, res: dict[str, Any]) -> None:
        self.r.hset(self.keys.batch(batch_id), mapping={
            f"result:{res['line']}": json.dumps(res, ensure_ascii=False),
            "updated_at": f"{time.time():.6f}"})

    def set_running(self, batch_id: str, running: int) -> None:
        self.r.hset(self.keys.batch(batch_id), "running", running)

    def finish(self, batch_id: str, stopped: str | None = None) -> None:
        key = self.keys.batch(batch_id)
        status = "cancelled" if stopped == "cancelled" else "done"
        extra = {"stopped": stopped} if stopped else {}
        self.r.hset(key, mapping={"status": status, "running": 0, "updated_at": f"{time.time():.6f}", **extra})
        self.r.expire(key, self.ttl)
        self.r.delete(self._lease(batch_id))

    def view(self, batch_id: str, *, with_results: bool) -> dict[str, Any] | None:
        raw = self.r.hgetall(self.keys.batch(batch_id))
        if not raw:
            return None
        f = {k.decode(): v.decode() for k, v in raw.items()}
        results = sorted((json.loads(v) for k, v in f.items() if k.startswith("result:")),
                         key=lambda x: int(x["line"]))
        t = Tally(total=int(f["total"]))
        for res in results:
            t.add(res)
        running = int(f.get("running", 0))
        view: dict[str, Any] = {
            "batch_id": batch_id, "status": f["status"], "total": t.total, "done": t.done,
            "succeeded": t.succeeded, "failed": t.failed, "invalid": t.invalid,
            "running": running, "queued": max(0, t.total - t.done - running), "tokens": t.tokens,
            "created_at": float(f["created_at"]), "updated_at": float(f["updated_at"]),
        }
        if "token_budget" in f or "stopped" in f or t.skipped:
            view.update(skipped=t.skipped, token_budget=int(f["token_budget"]) if "token_budget" in f else None,
                        stopped=f.get("stopped"))
        if with_results:
            view["results"] = results
        return view

    # -- the driving gateway's lease -------------------------------------------------------
    def _lease(self, batch_id: str) -> str:
        return self.keys.batch_driver(batch_id)

    def claim(self, batch_id: str, holder: str) -> bool:
        return bool(self.r.set(self._lease(batch_id), holder, nx=True, px=self.LEASE_MS))

    def renew(self, batch_id: str, holder: str) -> None:
        self.r.set(self._lease(batch_id), holder, px=self.LEASE_MS)

    def release(self, batch_id: str) -> None:
        self.r.delete(self._lease(batch_id))

    def unfinished(self) -> list[str]:
        """Ids of batches still ``running`` (candidates for resuming at gateway start)."""
        out = []
        # SCAN patterns take braces literally; on a cluster redis-py scans every primary.
        for key in self.r.scan_iter(match=self.keys.batch("*"), count=1000, _type="HASH"):
            name = self.keys.batch_id_of(key.decode())
            if name is not None and self.r.hget(key, "status") == b"running":
                out.append(name)
        return out


def drive_stored_batch(dispatcher: Any, store: BatchStore, batch_id: str, holder: str,
                       stop: threading.Event) -> None:
    """Drive one HTTP batch to its end (in a thread of the gateway)."""
    items, concurrency, done = store.items(batch_id)
    todo = [it for it in items if it.line not in done]
    last_renew = time.monotonic()

    def tick(t: Tally) -> None:
        nonlocal last_renew
        store.set_running(batch_id, t.running)
        if time.monotonic() - last_renew > BatchStore.LEASE_MS / 3000:
            store.renew(batch_id, holder)
            last_renew = time.monotonic()

    driver = BatchDriver(dispatcher, f"http-batch:{batch_id}", concurrency,
                         on_result=lambda res: store.add_result(batch_id, res), on_tick=tick, stop=stop,
                         batch_id=batch_id, token_budget=store.token_budget(batch_id),
                         cancelled=lambda: store.cancel_requested(batch_id))
    try:
        driver.run(todo)
    except (redis.RedisError, ConfigError):
        log.exception("batch %s stopped; the next gateway start resumes it", batch_id)
        return
    if stop.is_set():
        store.release(batch_id)  # let another gateway resume it now, not in LEASE_MS
    else:
        store.finish(batch_id, driver.tally.stopped)


def holder_name() -> str:
    return f"{os.uname().nodename}:{os.getpid()}"
