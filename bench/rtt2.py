"""``P1-rtt2``: P1 with 2 ms of round-trip time between every process and Redis.

Redis runs in a network namespace of its own (root only), joined to this one by a veth pair
whose two ends each delay what they send by 1 ms (``tc netem``): every worker and this process
reach Redis (state and broker) 2 ms of round trip away; the scripted LLM server stays on
loopback. P1 and its floor, the two bare Celery hops, are then measured as usual on these
workers, under the same delay. Only the namespace and the link made here are touched; ``stop``
removes both. A kernel without ``netem`` (``Specified qdisc kind is unknown``) gets the same
delay from a userspace proxy instead (``bench/delayproxy.py``); the figure says which (``how``).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys

from bench.cluster import ROOT, Cluster
from bench.report import Figure
from reactq.shared.redisconn import free_port, server_binary, start_server

DELAY_MS = 1.0  # each way


def _run(*cmd: str) -> None:
    if os.geteuid() != 0 or not shutil.which(cmd[0]):
        raise RuntimeError(f"`{cmd[0]}` as root is needed for a network namespace")
    res = subprocess.run(list(cmd), capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {res.stderr.strip()[:300]}")


class DelayedCluster(Cluster):
    """A ``Cluster`` whose Redis is ``2 × DELAY_MS`` of round trip away."""

    def __init__(self, *, delay_ms: float = DELAY_MS) -> None:
        super().__init__()
        tag = os.getpid() % 100000
        self.ns, self.outer, self.inner = f"rqrtt{tag}", f"rqrtt{tag}a", f"rqrtt{tag}b"
        octet = 16 + tag % 200
        self.host_ip, self.redis_ip = f"10.231.{octet}.1", f"10.231.{octet}.2"
        self.delay_ms = delay_ms
        self.proxy: subprocess.Popen[bytes] | None = None
        self.how = ""

    def start(self) -> None:
        try:
            self._start_netns()
            self.how = "netns + tc netem"
        except RuntimeError as exc:
            self._drop_netns()
            self.how = f"a delaying TCP proxy (bench/delayproxy.py): {exc}"[:300]
            self._start_proxied()
        self._wait_redis()
        self._start_llm()

    def _start_proxied(self) -> None:
        port, proxy_port = free_port(), free_port()
        self.redis_binary = server_binary()
        self.redis_proc = start_server(port, self.tmp / "redis")
        self.proxy = subprocess.Popen(
            [sys.executable, "-m", "bench.delayproxy", str(proxy_port), "127.0.0.1", str(port),
             str(self.delay_ms)], cwd=ROOT, start_new_session=True)
        self.redis_url = f"redis://127.0.0.1:{proxy_port}/0"

    def _start_netns(self) -> None:
        self._link()
        port = 6379
        log = (self.tmp / "redis.log").open("wb")
        self.redis_binary = server_binary()
        self.redis_proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, self.redis_binary, "--bind", self.redis_ip, "--port", str(port),
             "--save", "", "--appendonly", "no", "--protected-mode", "no", "--dir", str(self.tmp)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.redis_url = f"redis://{self.redis_ip}:{port}/0"

    def _link(self) -> None:
        _run("ip", "netns", "add", self.ns)
        _run("ip", "link", "add", self.outer, "type", "veth", "peer", "name", self.inner)
        _run("ip", "link", "set", self.inner, "netns", self.ns)
        _run("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.outer)
        _run("ip", "link", "set", self.outer, "up")
        inside = ("ip", "netns", "exec", self.ns)
        _run(*inside, "ip", "addr", "add", f"{self.redis_ip}/30", "dev", self.inner)
        _run(*inside, "ip", "link", "set", self.inner, "up")
        _run(*inside, "ip", "link", "set", "lo", "up")
        delay = f"{self.delay_ms}ms"
        _run("tc", "qdisc", "add", "dev", self.outer, "root", "netem", "delay", delay)
        _run(*inside, "tc", "qdisc", "add", "dev", self.inner, "root", "netem", "delay", delay)

    def _wait_redis(self) -> None:
        import time

        import redis

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                redis.Redis.from_url(self.redis_url, socket_timeout=1).ping()
                return
            except (redis.RedisError, OSError):
                time.sleep(0.1)
        raise RuntimeError(f"Redis in {self.ns} did not answer:\n{(self.tmp / 'redis.log').read_text()[-2000:]}")

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            if self.proxy is not None and self.proxy.poll() is None:
                os.killpg(self.proxy.pid, signal.SIGTERM)
                self.proxy.wait()
            self._drop_netns()

    def _drop_netns(self) -> None:
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.outer], capture_output=True)

    def rtt_ms(self) -> float:
        """The measured round trip of a PING from this process (median of 20)."""
        import statistics
        import time

        r = self.redis()
        samples = []
        for _ in range(20):
            t0 = time.perf_counter()
            r.ping()
            samples.append((time.perf_counter() - t0) * 1000)
        return statistics.median(samples)


def p1_rtt2(fig: Figure, cl: DelayedCluster) -> Figure:
    """P1 measured on a ``DelayedCluster``, renamed and described as such."""
    return dataclasses.replace(
        fig, id="P1-rtt2",
        what=f"P1 with {2 * DELAY_MS:g} ms of RTT between every process and Redis",
        details={**fig.details, "ping_rtt_ms": cl.rtt_ms(), "delay_each_way_ms": DELAY_MS, "how": cl.how})
