"""A batch's lines: parsing and validating them (``BatchItem``), the result line each one
ends as, the tally of results, and the idempotency key that makes a resumed batch re-attach
to the runs an earlier attempt submitted.

Input lines are ``RunRequest`` objects, optionally with an ``id`` (a string or an integer;
a line without one gets its 1-based line number as id). A bad line (not JSON, not an
object, a field out of range, an unknown tool…) becomes a result line with status
``invalid`` and an error naming the line and the field; the batch goes on.

Each result line: ``{id, line, run_id, status, answer, output, iterations, usage, elapsed,
error}`` (``output``: the parsed answer of a line with an ``output_schema``, else null). A line
whose ``output_schema`` is not a valid JSON Schema is ``invalid`` like any other bad line.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from reactq.shared.errors import RequestError
from reactq.shared.inputs import loads_strict
from reactq.shared.requests import RunRequest


@dataclass
class BatchItem:
    """One input line: a valid request, or the reason it is not one."""

    line: int
    id: str | int
    request: RunRequest | None = None
    error: str | None = None
    replay: dict[str, Any] | None = None
    """A ``ReplayPolicy`` (as JSON) for the line's run: an eval's replay of an earlier eval."""

    def to_dict(self) -> dict[str, Any]:
        req = self.request.model_dump(mode="json", exclude_defaults=True) if self.request else None
        out = {"line": self.line, "id": self.id, "request": req, "error": self.error}
        return {**out, "replay": self.replay} if self.replay else out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BatchItem:
        req = RunRequest.model_validate(d["request"]) if d.get("request") is not None else None
        return cls(line=int(d["line"]), id=d["id"], request=req, error=d.get("error"), replay=d.get("replay"))


def format_validation(exc: ValidationError) -> str:
    """``field: message; field: message`` (the field, then pydantic's words with the limit)."""
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "<request>"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


Validator = Callable[[RunRequest], object]


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



# -- results -------------------------------------------------------------------------------

def _result_line(item: BatchItem, status: str, error: str | None, run_id: str | None = None,
                 result: dict[str, Any] | None = None) -> dict[str, Any]:
    res = result or {}
    return {"id": item.id, "line": item.line, "run_id": run_id, "status": status,
            "answer": res.get("answer"), "output": res.get("output"), "iterations": res.get("iterations", 0),
            "usage": res.get("usage"), "elapsed": res.get("elapsed", 0.0), "error": error}


def invalid_result(item: BatchItem) -> dict[str, Any]:
    return _result_line(item, "invalid", item.error)


def skipped_result(item: BatchItem, reason: str) -> dict[str, Any]:
    return _result_line(item, "skipped", f"skipped: batch {reason}")


def run_result(item: BatchItem, run_id: str, result: dict[str, Any] | None, status: str) -> dict[str, Any]:
    res = result or {}
    error = res.get("error") or (None if result else f"run {run_id} expired before its result was read")
    return _result_line(item, res.get("status", status), error, run_id, res)


@dataclass
class Tally:
    """Counts shown by the progress bar and returned at the end."""

    total: int = 0
    succeeded: int = 0
    failed: int = 0
    invalid: int = 0
    running: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    """Dollars the finished lines' runs were billed (priced models only)."""
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
        usage = res.get("usage") or {}
        self.tokens += int(usage.get("total_tokens") or 0)
        self.cost_usd = round(self.cost_usd + float(usage.get("cost_usd") or 0.0), 11)


def idem_key(source: str, item_id: str | int, request: RunRequest) -> str:
    """The idempotency key of one line: a hash of where the batch comes from, the line id
    and the request itself — so a line edited between two attempts is a new run, not the
    old line's answer handed back."""
    body = request.model_dump_json(exclude={"idempotency_key"})
    digest = hashlib.sha256(f"{source}\0{item_id}\0{body}".encode()).hexdigest()[:40]
    return f"batch:{digest}"

