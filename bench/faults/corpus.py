"""The bad-input corpus, shared by ``tests/integration/test_bad_input.py``
and ``bench/faults/f_badinput.py``.

Each ``Case`` is one malformed request and the field its 4xx must name. ``check`` says what
went wrong with a response, or None: a 4xx (never a 500), the field named in ``loc`` (or the
detail), and no more than ``MAX_ECHO`` characters of response.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx2

MAX_ECHO = 2000
LONG = "x" * 120_000


@dataclass
class Case:
    name: str
    method: str
    path: str
    field: str
    json_body: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    statuses: tuple[int, ...] = (422,)

    def send(self, client: httpx2.Client) -> httpx2.Response:
        kw: dict[str, Any] = {"headers": self.headers, "params": self.params}
        if self.content is not None:
            kw["content"] = self.content
            kw["headers"] = {"content-type": "application/json", **self.headers}
        elif self.json_body is not None:
            kw["json"] = self.json_body
        return client.request(self.method, self.path, **kw)


def _raw(name: str, path: str, body: bytes | str, fld: str = "body", **kw: Any) -> Case:
    return Case(name, "POST", path, fld, content=body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body, **kw)


def _nested(depth: int) -> str:
    return '{"query": "q", "metadata": {"x": ' + "[" * depth + "]" * depth + "}}"


def run_cases(run: str) -> list[Case]:
    p = "/v1/runs"
    return [
        Case("max_iterations true", "POST", p, "max_iterations", {"query": "q", "max_iterations": True}),
        Case("max_iterations '5'", "POST", p, "max_iterations", {"query": "q", "max_iterations": "5"}),
        Case("max_iterations 1e3", "POST", p, "max_iterations", {"query": "q", "max_iterations": 1000}),
        Case("max_iterations 5.0", "POST", p, "max_iterations", {"query": "q", "max_iterations": 5.5}),
        Case("completion_check 'yes'", "POST", p, "completion_check", {"query": "q", "completion_check": "yes"}),
        Case("completion_check 1", "POST", p, "completion_check", {"query": "q", "completion_check": 1}),
        Case("unknown field", "POST", p, "surprise", {"query": "q", "surprise": 1}),
        Case("no query", "POST", p, "query", {"model": "scripted"}),
        Case("query null", "POST", p, "query", {"query": None}),
        Case("query blank", "POST", p, "query", {"query": "   "}),
        Case("query too long", "POST", p, "query", {"query": LONG[:100_001]}),
        Case("query a list", "POST", p, "query", {"query": ["q"]}),
        Case("tools a string", "POST", p, "tools", {"query": "q", "tools": "calculator"}),
        Case("tools [1]", "POST", p, "tools", {"query": "q", "tools": [1]}),
        Case("unknown tool", "POST", p, "tools", {"query": "q", "tools": ["no_such_tool"]}),
        Case("unknown model", "POST", p, "model", {"query": "q", "model": "no-such-model"}),
        Case("model 123", "POST", p, "model", {"query": "q", "model": 123}),
        Case("mode fast", "POST", p, "mode", {"query": "q", "mode": "fast"}),
        Case("metadata a list", "POST", p, "metadata", {"query": "q", "metadata": []}),
        Case("idempotency_key empty", "POST", p, "idempotency_key", {"query": "q", "idempotency_key": ""}),
        Case("system_prompt 5", "POST", p, "system_prompt", {"query": "q", "system_prompt": 5}),
        Case("body a list", "POST", p, "body", [{"query": "q"}]),
        Case("body a string", "POST", p, "body", "q"),
        _raw("body null", p, "null"),
        _raw("NaN", p, '{"query": "q", "metadata": {"x": NaN}}'),
        _raw("Infinity", p, '{"query": "q", "metadata": {"x": -Infinity}}'),
        _raw("1e999", p, '{"query": "q", "metadata": {"x": 1e999}}'),
        _raw("lone surrogate escaped", p, '{"query": "q\\ud800"}'),
        _raw("lone surrogate raw", p, '{"query": "q\ud800"}'),
        _raw("non-UTF-8", p, b'{"query": "caf\xe9"}'),
        _raw("latin-1 header lie", p, b'\xff\xfe{\x00"\x00', headers={"content-type": "application/json; charset=utf-16"}),
        _raw("nested 100", p, _nested(100)),
        _raw("nested 100k", p, _nested(100_000)),
        _raw("truncated JSON", p, '{"query": "q"'),
        _raw("trailing garbage", p, '{"query": "q"} x'),
        _raw("empty body", p, b""),
        _raw("huge int", p, '{"query": "q", "max_iterations": ' + "9" * 5000 + "}"),
        Case("id with colon", "GET", "/v1/runs/ID:events", "run_id", statuses=(404, 422)),
        Case("id with braces", "GET", "/v1/runs/%7Bx%7D", "run_id", statuses=(404, 422)),
        Case("id too long", "GET", "/v1/runs/" + "a" * 300, "run_id", statuses=(404, 422)),
        Case("events of ID:events", "GET", "/v1/runs/ID:events/events", "run_id", statuses=(404, 422)),
        Case("Last-Event-ID bogus", "GET", f"/v1/runs/{run}/events", "last-event-id",
             headers={"Last-Event-ID": "bogus"}),
        Case("Last-Event-ID > 2^64", "GET", f"/v1/runs/{run}/events", "last-event-id",
             headers={"Last-Event-ID": "99999999999999999999-0"}),
        Case("Last-Event-ID negative", "GET", f"/v1/runs/{run}/events", "last-event-id",
             headers={"Last-Event-ID": "-1"}),
        Case("after 1-2-3", "GET", f"/v1/runs/{run}/events", "after", params={"after": "1-2-3"}),
        Case("interrupt content 5", "POST", f"{p}/{run}/interrupts", "content", {"content": 5}),
        Case("interrupt no content", "POST", f"{p}/{run}/interrupts", "content", {}),
        Case("interrupt empty", "POST", f"{p}/{run}/interrupts", "content", {"content": ""}),
        Case("interrupt too long", "POST", f"{p}/{run}/interrupts", "content", {"content": LONG[:20_001]}),
        Case("interrupt unknown field", "POST", f"{p}/{run}/interrupts", "role", {"content": "x", "role": "system"}),
        _raw("interrupt NaN", f"{p}/{run}/interrupts", '{"content": "x", "n": NaN}'),
        Case("interrupt ID:events", "POST", f"{p}/ID:events/interrupts", "run_id", {"content": "x"},
             statuses=(404, 422)),
        Case("cancel ID:events", "POST", f"{p}/ID:events/cancel", "run_id", statuses=(404, 422)),
    ]


def batch_cases() -> list[Case]:
    p = "/v1/batches"
    ok = [{"query": "q"}]
    jsonl = {"content-type": "application/x-ndjson"}
    return [
        Case("batch no requests", "POST", p, "requests", {"requests": []}),
        Case("batch requests a dict", "POST", p, "requests", {"requests": {"query": "q"}}),
        Case("batch concurrency '5'", "POST", p, "concurrency", {"requests": ok, "concurrency": "5"}),
        Case("batch concurrency true", "POST", p, "concurrency", {"requests": ok, "concurrency": True}),
        Case("batch concurrency 0", "POST", p, "concurrency", {"requests": ok, "concurrency": 0}),
        Case("batch unknown field", "POST", p, "priority", {"requests": ok, "priority": 1}),
        Case("batch ?concurrency=x", "POST", p, "concurrency", {"requests": ok}, params={"concurrency": "x"}),
        Case("batch JSONL non-UTF-8", "POST", p, "body", content=b'{"query": "\xff"}\n', headers=jsonl),
        Case("batch JSONL empty", "POST", p, "body", content=b"\n\n", headers=jsonl),
        _raw("batch NaN", p, '{"requests": [{"query": "q", "metadata": {"x": NaN}}]}'),
        Case("batch id ID:x", "GET", "/v1/batches/ID:x", "batch_id", statuses=(404, 422)),
    ]


def dag_cases(dag: str) -> list[Case]:
    p = "/v1/dags"
    return [
        Case("dag max_rounds '3'", "POST", p, "max_rounds", {"goal": "g", "max_rounds": "3"}),
        Case("dag max_concurrency true", "POST", p, "max_concurrency", {"goal": "g", "max_concurrency": True}),
        Case("dag unknown field", "POST", p, "deadline", {"goal": "g", "deadline": 5}),
        Case("dag step unknown field", "POST", p, "color", {"goal": "g", "steps": [{"id": "a", "task": "t", "color": 1}]}),
        Case("dag cycle", "POST", p, "steps", {"goal": "g", "steps": [
            {"id": "a", "task": "t", "dependencies": ["b"]}, {"id": "b", "task": "t", "dependencies": ["a"]}]}),
        Case("dag no goal", "POST", p, "goal", {"steps": []}),
        _raw("dag Infinity", p, '{"goal": "g", "metadata": {"x": Infinity}}'),
        Case("dag ID:events", "GET", f"{p}/ID:events/events", "dag_id", statuses=(404, 422)),
        Case("dag Last-Event-ID bogus", "GET", f"{p}/{dag}/events", "last-event-id",
             headers={"Last-Event-ID": "bogus"}),
        Case("dag interrupt unknown field", "POST", f"{p}/{dag}/interrupts", "urgent",
             {"content": "x", "urgent": True}),
        Case("dag interrupt too long", "POST", f"{p}/{dag}/interrupts", "content", {"content": LONG[:20_001]}),
        Case("dag cancel ID:x", "POST", f"{p}/ID:x/cancel", "dag_id", statuses=(404, 422)),
    ]


def all_cases(run: str, dag: str) -> list[Case]:
    return run_cases(run) + batch_cases() + dag_cases(dag)


def names_field(res: httpx2.Response, fld: str) -> bool:
    """The error (``{"error": {code, message, field?, details?}}``) names ``fld``: as its
    field, a detail's field or location, or in a message."""
    try:
        err = res.json().get("error")
    except (ValueError, AttributeError):
        return False
    if not isinstance(err, dict):
        return False
    named = [err.get("field"), err.get("message")]
    for d in err.get("details") or []:
        named += [d.get("field"), d.get("location"), d.get("message")]
    return any(fld == str(n) or fld in str(n).split(".") or fld in str(n or "") for n in named if n)


def check(case: Case, res: httpx2.Response) -> str | None:
    """What is wrong with ``res`` as the answer to ``case``, or None."""
    if res.status_code >= 500:
        return f"{case.name}: {res.status_code}"
    if res.status_code not in case.statuses:
        return f"{case.name}: {res.status_code}, expected {case.statuses}: {res.text[:300]}"
    if len(res.content) > MAX_ECHO:
        return f"{case.name}: the {res.status_code} is {len(res.content)} bytes long (echoes the input)"
    if not names_field(res, case.field):
        return f"{case.name}: does not name {case.field!r}: {res.text[:300]}"
    return None


def dumps(obj: Any) -> str:
    return json.dumps(obj)
