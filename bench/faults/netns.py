"""Hosts as Linux network namespaces (root only): one switch namespace holding a bridge, and one
namespace per host joined to it by a veth pair, on a private /24. The test process joins the
switch too (one veth end in the root namespace, ``.254``) to serve the scripted LLM and to
watch. Only the namespaces and links created here are touched, and ``close`` removes them all.

A partition unplugs a host's link from the bridge: the host's processes keep running, cut off.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


def netns_missing() -> str | None:
    """Why namespaces cannot be built here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not shutil.which("ip"):
        return "iproute2 (`ip`) is not installed"
    probe = f"rqprobe{os.getpid() % 100000}"
    res = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if res.returncode != 0:
        return f"`ip netns add` failed: {res.stderr.strip()[:200]}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@dataclass
class Topology:
    hosts: list[str]
    tag: str = field(default_factory=lambda: f"rq{os.getpid() % 10000}{random.randint(10, 99)}")
    net: int = field(default_factory=lambda: random.randint(20, 250))
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _up: bool = False

    def ns(self, host: str) -> str:
        return f"{self.tag}-{host}"

    @property
    def switch(self) -> str:
        return f"{self.tag}-sw"

    def ip(self, host: str) -> str:
        return f"10.213.{self.net}.{self.hosts.index(host) + 1}"

    @property
    def root_ip(self) -> str:
        return f"10.213.{self.net}.254"

    def _port(self, host: str) -> str:
        return f"{self.tag}s{self.hosts.index(host)}"  # the host's link, switch side (≤ 15 chars)

    def build(self) -> Topology:
        self._up = True
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, host in enumerate(self.hosts):
            ns, inner = self.ns(host), f"{self.tag}h{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", inner, "type", "veth", "peer", "name", self._port(host))
            _ip("link", "set", inner, "netns", ns)
            _ip("-n", ns, "link", "set", inner, "name", "eth0")
            _ip("-n", ns, "addr", "add", f"{self.ip(host)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            self._attach(self._port(host))
        _ip("link", "add", f"{self.tag}r", "type", "veth", "peer", "name", f"{self.tag}sr")
        _ip("addr", "add", f"{self.root_ip}/24", "dev", f"{self.tag}r")
        _ip("link", "set", f"{self.tag}r", "up")
        self._attach(f"{self.tag}sr")
        return self

    def _attach(self, port: str) -> None:
        _ip("link", "set", port, "netns", self.switch)
        _ip("-n", self.switch, "link", "set", port, "master", "br0")
        _ip("-n", self.switch, "link", "set", port, "up")

    def partition(self, host: str) -> None:
        """Unplug the host from the bridge: its link stays up (no carrier change, so nothing
        fails fast), every packet is lost, and established connections hang as in a real
        partition until it heals."""
        _ip("-n", self.switch, "link", "set", self._port(host), "nomaster")

    def heal(self, host: str) -> None:
        _ip("-n", self.switch, "link", "set", self._port(host), "master", "br0")

    def spawn(self, host: str, cmd: list[str], env: dict[str, str], log: Path,
              cwd: Path | None = None) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns(host), *cmd], env=env, cwd=cwd,
                                stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for p in self.procs:  # only the process groups started here
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            p.wait()
        if not self._up:
            return
        subprocess.run(["ip", "link", "del", f"{self.tag}r"], capture_output=True)
        for name in [self.switch, *(self.ns(h) for h in self.hosts)]:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self._up = False
