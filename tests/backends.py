"""Real back ends the scale tiers run against, each started (or created) by the test and removed
after it: a 3-master Redis Cluster on loopback ports, a TLS ``redis-server`` with a self-signed
certificate and an ACL user, and RabbitMQ vhosts on the machine's broker.

``REACTQ_TEST_BACKEND`` (read by ``tests/integration/conftest.py``) picks the layout the
integration suite's core scenarios run on: ``redis`` (default: one server, broker and state),
``rabbitmq`` (state on one server, broker = a vhost of the local RabbitMQ per isolated test),
``cluster`` (state on a Redis Cluster, broker = a vhost of the local RabbitMQ).
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reactq.shared.redisconn import free_port

RABBIT_HOST = "127.0.0.1"
RABBIT_PORT = 5672


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited at start (port {port})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout}s")


def cluster_port() -> int:
    """A free port whose cluster-bus port (+10000) is free too (Redis wants ≤ 55535)."""
    import random

    for _ in range(200):
        port = random.randint(20000, 45000)
        if all(_free(p) for p in (port, port + 10000)):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
    for p in procs:
        p.wait()


# ------------------------------------------------------------------------- Redis Cluster


@dataclass
class RedisClusterProc:
    ports: list[int]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        """One node is enough: redis-py discovers the others."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def stop(self) -> None:
        _stop(self.procs)


def start_redis_cluster(base: Path, masters: int = 3) -> RedisClusterProc:
    """``redis-server --cluster-enabled yes`` × ``masters`` + ``redis-cli --cluster create``."""
    server = shutil.which("redis-server")
    cli = shutil.which("redis-cli")
    if not server or not cli:
        raise RuntimeError("redis-server and redis-cli (Redis 7) are needed for the cluster tier")
    ports = [cluster_port() for _ in range(masters)]
    cluster = RedisClusterProc(ports)
    try:
        for port in ports:
            d = base / f"node-{port}"
            d.mkdir(parents=True, exist_ok=True)
            cluster.procs.append(subprocess.Popen(
                [server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                 "--cluster-config-file", str(d / "nodes.conf"), "--dir", str(d), "--save", "",
                 "--appendonly", "no", "--protected-mode", "no", "--loglevel", "warning"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        for port, proc in zip(ports, cluster.procs, strict=True):
            _wait_port(port, proc, "a cluster node")
        subprocess.run([cli, "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports],
                        "--cluster-replicas", "0", "--cluster-yes"],
                       check=True, capture_output=True, timeout=60)
        _wait_cluster_ok(cli, ports)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait_cluster_ok(cli: str, ports: list[int], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ok = all("cluster_state:ok" in subprocess.run(
            [cli, "-p", str(p), "cluster", "info"], capture_output=True, text=True).stdout
            for p in ports)
        if ok:
            return
        time.sleep(0.2)
    raise RuntimeError("the Redis Cluster did not reach cluster_state:ok")


# ------------------------------------------------------------------- TLS Redis with an ACL


@dataclass
class TlsRedis:
    port: int
    ca_file: Path
    username: str
    password: str
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        _stop([self.proc])


def make_cert(dirpath: Path) -> tuple[Path, Path, Path]:
    """A self-signed CA and a server certificate for 127.0.0.1/localhost (openssl)."""
    dirpath.mkdir(parents=True, exist_ok=True)
    ca_key, ca, key, csr, crt = (dirpath / n for n in ("ca.key", "ca.crt", "server.key", "server.csr", "server.crt"))
    ext = dirpath / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=reactq-test-ca",
        "-keyout", str(ca_key), "-out", str(ca))
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(csr))
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
        "-days", "2", "-extfile", str(ext), "-out", str(crt))
    return ca, crt, key


def start_tls_redis(base: Path) -> TlsRedis:
    """A ``redis-server`` that speaks TLS only, requires the ACL user it defines, no default user."""
    ca, crt, key = make_cert(base / "certs")
    port = free_port()
    user, password = "reactq", uuid.uuid4().hex
    proc = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", "0", "--tls-port", str(port),
         "--bind", "127.0.0.1", "--tls-cert-file", str(crt), "--tls-key-file", str(key),
         "--tls-ca-cert-file", str(ca), "--tls-auth-clients", "no", "--dir", str(base),
         "--save", "", "--appendonly", "no", "--loglevel", "warning",
         "--user", "default", "off",
         "--user", user, "on", f">{password}", "~*", "&*", "+@all"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    _wait_port(port, proc, "the TLS redis-server")
    return TlsRedis(port, ca, user, password, proc)


# ------------------------------------------------------------------------------ RabbitMQ


def rabbit_missing() -> str | None:
    """Why the RabbitMQ tier cannot run here (None: it can)."""
    if not shutil.which("rabbitmqctl"):
        return "rabbitmqctl is not installed"
    try:
        with socket.create_connection((RABBIT_HOST, RABBIT_PORT), timeout=1):
            pass
    except OSError:
        return f"no RabbitMQ on {RABBIT_HOST}:{RABBIT_PORT}"
    res = subprocess.run(["rabbitmqctl", "-q", "list_vhosts"], capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        return f"rabbitmqctl cannot manage the broker (run as root?): {res.stderr.strip()[:200]}"
    return None


class RabbitVhosts:
    """Vhosts of the machine's RabbitMQ created for one test session, deleted at its end."""

    def __init__(self, tag: str | None = None) -> None:
        self.tag = tag or f"reactq-test-{uuid.uuid4().hex[:8]}"
        self.created: list[str] = []

    def url(self, name: str = "main") -> str:
        vhost = f"{self.tag}-{name}"
        if vhost not in self.created:
            _ctl("add_vhost", vhost)
            _ctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
            self.created.append(vhost)
        return f"amqp://guest:guest@{RABBIT_HOST}:{RABBIT_PORT}/{vhost}"

    def delete_all(self) -> None:
        for vhost in self.created:
            _ctl("delete_vhost", vhost, check=False)
        self.created.clear()


def _ctl(*args: str, check: bool = True) -> Any:
    return subprocess.run(["rabbitmqctl", "-q", *args], check=check, capture_output=True,
                          text=True, timeout=60)
