"""A flow-control test cluster: its own (enforcing) scripted server, model registry file with
limits, Redis database and worker processes, so no other test shares its limits.

Each worker reads its own copy of the registry, which differs only in one request header
(``x-reactq-worker``), so the server's request log tells which worker process sent a call."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from reactq.dispatcher.client import Dispatcher
from reactq.shared.settings import Settings
from tests.integration.conftest import LLMFixture, ScriptBook, WorkerFactory
from tests.scripted_server import Reply, ScriptedServer, first_user_text, reply_text

USAGE = {"prompt_tokens": 80, "completion_tokens": 20, "total_tokens": 100}
WORKER_HEADER = "x-reactq-worker"
_dbs = itertools.cycle(range(9, 16))  # 16 databases; other tests use the low ones


def registry_toml(base_url: str, limits: dict[str, int] | None, worker: str | None = None) -> str:
    lines = ["[models.scripted]", 'model = "scripted"', f'base_url = "{base_url}"',
             'roles = ["general", "fast", "reasoning", "smart"]',
             "abilities = { tool_call = true, json_mode = true }"]
    if worker is not None:
        lines.append(f'extra_headers = {{ "{WORKER_HEADER}" = "{worker}" }}')
    lines += [f"{k} = {v}" for k, v in (limits or {}).items()]
    return "\n".join(lines) + "\n"


class FlowCluster:
    def __init__(self, redis_url: str, tmp: Path, *, limits: dict[str, int] | None = None,
                 server_rpm: int | None = None, server_tpm: int | None = None, window_s: float = 60.0,
                 workers: int = 2, concurrency: int = 4,
                 handler: Callable[[ScriptBook], Callable[[dict[str, Any]], Reply]] | None = None,
                 **env: str) -> None:
        self.book = ScriptBook()
        self.handler = handler(self.book) if handler else self.book
        self.server = ScriptedServer(self.handler, rpm=server_rpm, tpm=server_tpm,
                                     window_s=window_s).start()
        self.url = redis_url.rsplit("/", 1)[0] + f"/{next(_dbs)}"
        self.r = redis.Redis.from_url(self.url)
        self.r.flushdb()
        models = tmp / "models.toml"
        models.write_text(registry_toml(self.server.base_url, limits))
        self.factory = WorkerFactory(self.url, LLMFixture(self.server, self.book), tmp)
        env = {"REACTQ_FLOW_COMPLETION_ESTIMATE": "32", **env}
        self.workers: list[Any] = []
        for i in range(workers):
            mine = tmp / f"models-flow{i}.toml"
            mine.write_text(registry_toml(self.server.base_url, limits, worker=f"flow{i}"))
            self.workers.append(self.factory.start(f"flow{i}", wait=False, concurrency=concurrency,
                                                   REACTQ_MODELS=str(mine), **env))
        for w in self.workers:
            self.factory.wait_ready(w)
        self.settings = Settings(redis_url=self.url, models=models, tools="tests.integration.tools:TOOLS")
        self.d = Dispatcher(self.settings)

    def close(self) -> None:
        self.factory.stop_all()
        self.server.stop()

    def simple(self, query: str) -> str:
        """One loop turn (the final answer) + the streamed synthesis: two calls, 100 tokens each."""
        return self.book.script(query, [reply_text(f"answer to {query}", usage=USAGE)],
                                synthesis=reply_text("final", usage=USAGE))

    def book_requests(self, query: str) -> list[Any]:
        return [r for r in self.server.requests if first_user_text(r.body) == query]

    def first_request_at(self, query: str) -> float | None:
        times = [r.received_at for r in self.server.requests if first_user_text(r.body) == query]
        return min(times) if times else None

    def callers(self, records: list[Any]) -> set[str]:
        """The workers (``flow0``, ``flow1``, …) that sent these logged requests."""
        return {r.headers.get(WORKER_HEADER, "?") for r in records}

    def wait_all(self, handles: list[Any], timeout: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        return [h.result(timeout=max(1.0, deadline - time.monotonic())) for h in handles]


class OnceHandler:
    """The book's replies, except that the request matching ``when`` gets ``reply`` once."""

    def __init__(self, book: ScriptBook, when: Callable[[dict[str, Any]], bool], reply: Reply) -> None:
        self.book = book
        self.when = when
        self.reply = reply
        self.fired = False
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            if not self.fired and self.when(request):
                self.fired = True
                return self.reply
        return self.book(request)
