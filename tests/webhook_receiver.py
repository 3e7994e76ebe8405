"""A real HTTP receiver on loopback for webhook tests: each path answers from its own plan
(status, headers, delay) and every request is recorded; plus an independent signature check
(a hand HMAC per the Standard Webhooks spec, not the library reactq signs with)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SECRET_KEY = b"reactq-test-webhook-signing-key!"
SECRET = "whsec_" + base64.b64encode(SECRET_KEY).decode()


@dataclass(frozen=True)
class Plan:
    """One answer: ``status``, extra ``headers``, and a ``delay`` before answering."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """``plan(path, [Plan, …])``: the n-th request to ``path`` gets the n-th plan (the last one
    repeats). ``connections`` counts every TCP connection accepted, answered or not."""

    def __init__(self) -> None:
        self.plans: dict[str, list[Plan]] = {}
        self.received: list[Received] = []
        self.connections = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                n = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(n)
                with outer._lock:
                    outer.received.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()},
                                                   raw, time.time()))
                    plans = outer.plans.get(self.path) or [Plan()]
                    count = sum(1 for r in outer.received if r.path == self.path)
                    plan = plans[min(count, len(plans)) - 1]
                time.sleep(plan.delay)
                self.send_response(plan.status)
                for k, v in plan.headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self) -> tuple[socket.socket, Any]:
                conn = super().get_request()
                with outer._lock:
                    outer.connections += 1
                return conn

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def plan(self, path: str, plans: Sequence[Plan]) -> str:
        with self._lock:
            self.plans[path] = list(plans)
        return self.url(path)

    def at(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path == path]

    def wait(self, path: str, n: int, timeout: float = 30.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.at(path)
            if len(got) >= n:
                return got
            time.sleep(0.05)
        raise AssertionError(f"{path}: {len(self.at(path))} of {n} requests in {timeout} s")


def signature_ok(rec: Received, secret: str = SECRET) -> bool:
    """The Standard Webhooks check, by hand: v1 = base64(HMAC-SHA256(key, id.ts.body))."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{rec.headers['webhook-id']}.{rec.headers['webhook-timestamp']}.".encode() + rec.body
    expected = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    given = rec.headers.get("webhook-signature", "").split(" ")
    return any(hmac.compare_digest(expected, g) for g in given)
