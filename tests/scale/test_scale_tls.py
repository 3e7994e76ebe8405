"""TLS and ACL auth to Redis: a ``redis-server`` started here speaks TLS only (self-signed CA made
with openssl), has no default user and one ACL user. Workers, broker and dispatcher reach it with
``rediss://`` + ``REACTQ_REDIS_CA_FILE`` + ``REACTQ_REDIS_USERNAME``/``REACTQ_REDIS_PASSWORD``."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from reactq.dispatcher.client import Dispatcher
from reactq.shared.redisconn import client
from reactq.shared.requests import RunRequest
from reactq.shared.settings import Settings
from tests.backends import TlsRedis, make_cert, start_tls_redis
from tests.integration.conftest import LLMFixture, ScriptBook, WorkerFactory
from tests.scripted_server import ScriptedServer, reply_text, reply_tool_calls

pytestmark = pytest.mark.tls


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRedis]:
    if not shutil.which("openssl"):
        pytest.skip("openssl is needed to make the test certificate")
    server = start_tls_redis(tmp_path_factory.mktemp("tls"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tls_llm() -> Iterator[LLMFixture]:
    book = ScriptBook()
    server = ScriptedServer(book, models=("scripted",)).start()
    yield LLMFixture(server, book)
    server.stop()


def _settings(tls: TlsRedis, **kw: object) -> Settings:
    base: dict[str, object] = dict(redis_url=tls.url, redis_ca_file=tls.ca_file,
                                   redis_username=tls.username, redis_password=tls.password)
    return Settings(**{**base, **kw})  # type: ignore[arg-type]


def test_the_ca_file_and_the_acl_user_are_required(tls: TlsRedis, tmp_path: Path) -> None:
    assert client(_settings(tls)).ping()
    other_ca, _, _ = make_cert(tmp_path / "other")
    with pytest.raises(redis.ConnectionError):  # a CA that did not sign the server's certificate
        client(_settings(tls, redis_ca_file=other_ca)).ping()
    with pytest.raises(redis.AuthenticationError):
        client(_settings(tls, redis_password="wrong")).ping()
    with pytest.raises((redis.AuthenticationError, redis.ResponseError)):  # no default user
        client(_settings(tls, redis_username=None, redis_password=None)).ping()


def test_a_run_with_a_tool_runs_over_tls_and_the_password_is_never_logged(
        tls: TlsRedis, tls_llm: LLMFixture, tmp_path: Path) -> None:
    env = {"REACTQ_REDIS_CA_FILE": str(tls.ca_file), "REACTQ_REDIS_USERNAME": tls.username,
           "REACTQ_REDIS_PASSWORD": tls.password}
    factory = WorkerFactory(tls.url, tls_llm, tmp_path, env)  # broker: the same server, over TLS
    try:
        worker = factory.start("tls-worker")
        settings = _settings(tls, model="scripted", tools="tests.integration.tools:TOOLS",
                             openai_api_key="k", openai_base_url=tls_llm.server.base_url)
        q = tls_llm.script(tls_llm.unique("over tls"), [
            reply_tool_calls([("c1", "slow", {"tag": "tls", "seconds": 0.0})]),
            reply_text("done over tls")])
        handle = Dispatcher(settings).submit(RunRequest(query=q))
        result = handle.result(timeout=60)
        assert result["status"] == "succeeded", result
        events = [e for _, e in handle.events(timeout=10)]
        assert any(e.data.get("tool_name") == "slow" for e in events)
        assert tls.password not in worker.log.read_text(errors="replace")
        assert all(tls.password not in str(e.data) for e in events)
        # The gateway reaches Redis and the broker (the same server) over TLS too.
        from fastapi.testclient import TestClient

        from reactq.dispatcher.http import create_app

        with TestClient(create_app(settings)) as api:
            health = api.get("/readyz").json()  # readiness: Redis, the broker, a worker
        assert (health["redis"], health["broker"]) == ("ok", "ok"), health
        assert tls.password not in str(health)
    finally:
        factory.stop_all()
