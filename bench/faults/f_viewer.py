"""The viewer's faults and figures: the run listing over a large index, and an SSE reader
resuming with Last-Event-ID across a gateway killed mid-stream (no browser: an httpx
client does what the page's fetch reader does). Self-contained: its own Redis and gateway.

Figures: ``list_ms`` (p50 / p95 of ``RunsIndex.page``, 50 rows, over ``RUNS`` runs:
unfiltered, by batch, by a status with stale members), ``http_list_ms`` (the same through the
gateway's ``GET /v1/runs``), ``resume`` (events published, received, duplicates, missing,
reconnects) — the property is duplicates == missing == 0.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx2
import redis

from reactq.shared.events import Event
from reactq.shared.keys import Keys
from reactq.shared.redisconn import free_port, start_server
from reactq.shared.stores.runs_index import RunFilter, RunsIndex
from reactq.shared.stores.runs import RunStore

RUNS = 20_000
EVENTS = 400


def _pcts(samples: list[float]) -> dict[str, float]:
    q = statistics.quantiles(samples, n=20)
    return {"p50": round(statistics.median(samples), 3), "p95": round(q[18], 3)}


def _time(fn: Any, n: int = 100) -> dict[str, float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return _pcts(out)


def _fill(store: RunStore, r: redis.Redis) -> None:
    for i in range(RUNS):
        store.create(f"run{i:06d}", {"query": f"question {i}", "model": "m"},
                     batch_id="B" if i % 100 == 0 else None)
    # Stale members (a crash between an index write and the hash): the listing must skip them.
    r.zadd(store.keys.runs_status("failed"), {f"run{i:06d}": float(i) for i in range(0, RUNS, 50)})


class _Gateway:
    def __init__(self, redis_url: str, port: int, log: Path) -> None:
        self.env = dict(os.environ, REACTQ_REDIS_URL=redis_url, REACTQ_SSE_KEEPALIVE="1")
        self.port, self.log, self.proc = port, log, None

    def start(self) -> None:
        cmd = [sys.executable, "-m", "uvicorn", "--factory", "reactq.dispatcher.http:create_app",
               "--port", str(self.port), "--log-level", "warning"]
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx2.get(f"http://127.0.0.1:{self.port}/ui/", timeout=1)
                return
            except httpx2.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("gateway did not start")

    def kill(self) -> None:
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _resume(store: RunStore, gw: _Gateway) -> dict[str, Any]:
    """Publish EVENTS events slowly; read them over SSE; kill and restart the gateway twice."""
    run_id = "resume-run"
    store.create(run_id, {"query": "q"})
    store.r.hset(store.keys.run(run_id), "status", "running")

    def publish() -> None:
        for seq in range(1, EVENTS + 1):
            channel = "done" if seq == EVENTS else "answer"
            store.publish(run_id, [Event(channel, {"seq": seq, "status": "delta", "content": "x"})])
            if seq == EVENTS:
                store.r.hset(store.keys.run(run_id), "status", "succeeded")
            time.sleep(0.03)  # slower than a gateway restart, so each kill cuts a live stream

    threading.Thread(target=publish, daemon=True).start()
    seqs: list[int] = []
    last_id: str | None = None
    reconnects = 0
    kills = {EVENTS // 3, 2 * EVENTS // 3}
    killed = 0
    done = False
    while not done and reconnects < 20:
        headers = {"Last-Event-ID": last_id} if last_id else {}
        try:
            with httpx2.stream("GET", f"http://127.0.0.1:{gw.port}/v1/runs/{run_id}/events",
                              headers=headers, timeout=10) as res:
                event_id = None
                for line in res.iter_lines():
                    if line.startswith("id: "):
                        event_id = line[4:]
                    elif line.startswith("data: "):
                        seq = int(line.split('"seq":')[1].split(",")[0].split("}")[0])
                        seqs.append(seq)
                        last_id = event_id
                        if seq == EVENTS:
                            done = True
                        if len(seqs) in kills:
                            kills.discard(len(seqs))
                            killed += 1
                            gw.kill()
                            time.sleep(0.3)
                            gw.start()
        except httpx2.HTTPError:
            pass
        reconnects += 0 if done else 1
    return {"published": EVENTS, "received": len(seqs), "duplicates": len(seqs) - len(set(seqs)),
            "missing": len(set(range(1, EVENTS + 1)) - set(seqs)), "gateway_kills": killed,
            "reconnects": reconnects,
            "in_order": seqs == sorted(seqs)}


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        server = start_server(port, Path(tmp) / "redis")
        url = f"redis://127.0.0.1:{port}/0"
        gw = _Gateway(url, free_port(), Path(tmp) / "gateway.log")
        try:
            r = redis.Redis.from_url(url)
            store = RunStore(r, keys=Keys(), ttl_seconds=3600)
            t0 = time.perf_counter()
            _fill(store, r)
            fill_s = time.perf_counter() - t0
            index = RunsIndex(r, Keys())
            figures: dict[str, Any] = {"runs": RUNS, "fill_s": round(fill_s, 2), "list_ms": {
                "all": _time(lambda: index.page(RunFilter(), limit=50)),
                "batch": _time(lambda: index.page(RunFilter(batch_id="B"), limit=50)),
                "stale_status": _time(lambda: index.page(RunFilter(status="failed"), limit=50), n=20),
            }}
            gw.start()
            with httpx2.Client(base_url=f"http://127.0.0.1:{gw.port}") as c:
                figures["http_list_ms"] = _time(lambda: c.get("/v1/runs", params={"limit": 50}).raise_for_status())
            figures["resume"] = _resume(store, gw)
            return figures
        finally:
            gw.kill() if gw.proc and gw.proc.poll() is None else None
            server.kill()
            server.wait()
