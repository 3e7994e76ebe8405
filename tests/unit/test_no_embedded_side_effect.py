"""The embedded Valkey starts only from the CLI's local conveniences and a Dispatcher built
without REACTQ_REDIS_URL, under a per-user data folder (never the current directory); both
attach to the one server already running there."""

from __future__ import annotations

from pathlib import Path

import pytest

from reactq.dispatcher.client import Dispatcher
from reactq.shared.errors import ConfigError
from reactq.shared.settings import Settings


@pytest.fixture
def unconfigured(monkeypatch, tmp_path: Path) -> Path:
    for name in ("REACTQ_REDIS_URL", "REACTQ_BROKER_URL", "REACTQ_DATA_DIR"):
        monkeypatch.setenv(name, "")  # recorded, so what the CLI helper exports is undone too
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_data_folder_is_per_user_not_the_current_directory(unconfigured: Path) -> None:
    assert Settings().data_dir == unconfigured / "xdg" / "reactq"


def test_a_dispatcher_without_a_redis_url_attaches_to_the_embedded_server(unconfigured: Path) -> None:
    from reactq.shared.redisconn import stop_embedded, with_embedded

    d = Dispatcher()
    try:
        url = d.settings.redis_url
        assert url and url.startswith("redis://127.0.0.1:")
        assert (unconfigured / "xdg" / "reactq" / "valkey.json").exists()
        assert not (unconfigured / ".reactq").exists(), "nothing under the current directory"
        assert d.redis.ping()
        assert d.celery.conf.broker_url == url, "the broker too"
        assert with_embedded(Settings()).redis_url == url, "the CLI's commands find the same server"
        assert Dispatcher().settings.redis_url == url, "a second one attaches, it starts no other"
    finally:
        assert stop_embedded(d.settings.data_dir)


def test_a_dispatcher_with_a_client_of_its_own_starts_nothing(unconfigured: Path) -> None:
    import fakeredis

    d = Dispatcher(redis_client=fakeredis.FakeRedis())
    assert d.settings.redis_url is None
    with pytest.raises(ConfigError, match="REACTQ_REDIS_URL"):
        _ = d.celery
    assert not any(unconfigured.rglob("valkey.json")), "a server was started"


def test_the_cli_local_convenience_starts_it_under_the_data_folder(unconfigured: Path, monkeypatch) -> None:
    from reactq.shared.redisconn import stop_embedded, with_embedded

    s = with_embedded(Settings())
    try:
        assert s.redis_url and s.redis_url.startswith("redis://127.0.0.1:")
        assert (unconfigured / "xdg" / "reactq" / "valkey.json").exists()
        import redis

        assert redis.Redis.from_url(s.redis_url).ping()
    finally:
        assert stop_embedded(s.data_dir)
