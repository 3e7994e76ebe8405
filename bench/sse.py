"""P5 through the HTTP gateway: worker publishes → an SSE client of ``reactq.dispatcher.http`` receives.

The gateway runs as its own process (``uvicorn --factory reactq.dispatcher.http:create_app``, what
``reactq serve`` runs); the client is ``http.client`` reading the ``text/event-stream``
response line by line in this process.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from typing import Any

from bench.cluster import ROOT, Cluster
from bench.runs import request
from bench.script import Scenario
from reactq.dispatcher.client import Dispatcher


class Gateway:
    def __init__(self, cl: Cluster, env: dict[str, str] | None = None) -> None:
        from reactq.shared.redisconn import free_port

        self.port = free_port()
        env = cl.worker_env(env or {})
        self.log = cl.tmp / "gateway.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "reactq.dispatcher.http:create_app",
             "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning",
             "--no-access-log"],
            cwd=ROOT, env=env, stdout=self.log.open("wb"), stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1):
                    return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the gateway did not start:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def watch(self, run_id: str, timeout: float = 60, auth: str | None = None,
              ) -> tuple[float, list[tuple[float, int, str, dict[str, Any]]]]:
        """(time the stream opened, [(received, seq, channel, data)]) until ``done``;
        ``auth``: an API key sent as ``Authorization: Bearer``."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        headers = {"Accept": "text/event-stream"} | ({"Authorization": f"Bearer {auth}"} if auth else {})
        conn.request("GET", f"/v1/runs/{run_id}/events", headers=headers)
        resp = conn.getresponse()
        opened = time.time()
        if resp.status != 200:
            raise RuntimeError(f"SSE answered {resp.status}: {resp.read()[:300]!r}")
        out = []
        channel, data = "", ""
        try:
            while True:
                line = resp.readline()
                if not line:
                    break
                text = line.decode().rstrip("\n")
                if text.startswith("event:"):
                    channel = text[6:].strip()
                elif text.startswith("data:"):
                    data = text[5:].strip()
                elif text == "" and data:
                    at = time.time()
                    payload = json.loads(data)
                    out.append((at, int(payload["seq"]), channel, payload))
                    if channel == "done":
                        break
                    channel, data = "", ""
        finally:
            conn.close()
        return opened, out


def sse_latencies(cl: Cluster, d: Dispatcher, sc: Scenario, runs: int) -> tuple[list[float], list[float]]:
    """(all events, answer deltas) publish → SSE receive, in ms; events published before the
    stream was open are left out (they were a backlog, not live delivery)."""
    gw = Gateway(cl)
    r = cl.redis()
    all_ms: list[float] = []
    delta_ms: list[float] = []
    try:
        for i in range(runs + 1):
            run_id = f"p5{uuid.uuid4().hex}"
            # Submit, then open the stream at once: the first LLM turn's latency (sc.delay)
            # gives the client time to connect before most events are published.
            d.submit(request(sc), run_id=run_id)
            opened, frames = gw.watch(run_id)
            published = {int(k): float(v) for k, v in r.hgetall(f"bench:pub:{run_id}").items()}
            if i == 0:
                continue  # the first run warms the gateway's connections
            for at, seq, channel, data in frames:
                if seq in published and published[seq] >= opened:
                    ms = (at - published[seq]) * 1000
                    all_ms.append(ms)
                    if channel == "answer" and data.get("status") == "delta":
                        delta_ms.append(ms)
    finally:
        gw.stop()
    return all_ms, delta_ms
