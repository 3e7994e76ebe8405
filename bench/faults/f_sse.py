"""1,000 SSE clients on one gateway process, with quiet streams and HTTP batches running.

``FAULTS_SSE_CLIENTS`` (1000) clients watch ``FAULTS_SSE_RUNS`` (10) runs whose LLM turns
are slow (``FAULTS_SSE_QUIET`` s, 20: longer than the keep-alive, 5 s here), while six HTTP
batches of slow runs keep six batch drivers busy and ``/healthz`` is probed every 50 ms.
Figures: clients, clients that got the ``done``, clients that got every event (compared with
the stored stream), the least keep-alives any client got, errors, ``/healthz`` p50 / p99 /
max in ms.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import sys
from typing import Any

import httpx2

from bench.cluster import Cluster, WorkerSpec
from bench.faults.common import BASE_ENV, GatewayProc, pct
from bench.script import Scenario
from reactq.dispatcher.client import Dispatcher
from reactq.shared.requests import RunRequest

CLIENTS = int(os.environ.get("FAULTS_SSE_CLIENTS", "1000"))
RUNS = int(os.environ.get("FAULTS_SSE_RUNS", "10"))
QUIET = float(os.environ.get("FAULTS_SSE_QUIET", "20"))
KEEPALIVE = 5.0


async def _watch(client: httpx2.AsyncClient, run_id: str) -> dict[str, Any]:
    ids: list[str] = []
    keepalives, done, cur = 0, False, {}
    async with client.stream("GET", f"/v1/runs/{run_id}/events") as res:
        if res.status_code != 200:
            raise RuntimeError(f"HTTP {res.status_code}")
        async for line in res.aiter_lines():
            if line.startswith(":"):
                keepalives += line.strip() == ": keepalive"
            elif line == "":
                if "data" in cur:
                    ids.append(cur.get("id", ""))
                    done = done or cur.get("event") == "done"
                cur = {}
            else:
                key, _, value = line.partition(":")
                cur[key] = value.lstrip(" ")
    return {"run_id": run_id, "ids": ids, "keepalives": keepalives, "done": done}


#: The probe is a process of its own: measured from the 1,000 clients' event loop, a
#: probe would time that loop's lag, not the gateway's answer.
_PROBE = """
import http.client, json, sys, time
port, stop = int(sys.argv[1]), sys.argv[2]
import os
times = []
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
while not os.path.exists(stop):
    t0 = time.perf_counter()
    conn.request("GET", "/healthz")
    conn.getresponse().read()
    times.append([round(t0, 3), (time.perf_counter() - t0) * 1000])
    time.sleep(0.05)
print(json.dumps(times))
"""


async def _load(url: str, run_ids: list[str]) -> list[Any]:
    limits = httpx2.Limits(max_connections=CLIENTS + 50, max_keepalive_connections=0)
    async with httpx2.AsyncClient(base_url=url, timeout=httpx2.Timeout(120, connect=60), limits=limits) as c:
        return await asyncio.gather(*(_watch(c, run_ids[i % len(run_ids)]) for i in range(CLIENTS)),
                                    return_exceptions=True)


def _batches(url: str, slow: Scenario) -> None:
    for n in range(6):
        body = "\n".join(json.dumps({"query": f"{slow.query()} batch={n} i={i}"}) for i in range(3))
        httpx2.post(f"{url}/v1/batches", content=body, timeout=30,
                   headers={"content-type": "application/x-ndjson"}).raise_for_status()


def run() -> dict[str, Any]:
    with Cluster() as cl:
        cl.start_workers(WorkerSpec(count=2, concurrency=16, env=BASE_ENV))
        gw = GatewayProc(cl, {"REACTQ_SSE_KEEPALIVE": str(KEEPALIVE)})
        try:
            d = Dispatcher(cl.settings())
            sc = Scenario(turns=2, calls=1, tool="echo", delay=QUIET)
            run_ids = [d.submit(RunRequest(query=f"{sc.query()} watched={n}")).run_id for n in range(RUNS)]
            _batches(gw.url, Scenario(turns=2, calls=1, tool="echo", delay=QUIET / 2))
            stop = cl.tmp / "probe.stop"
            probe = subprocess.Popen([sys.executable, "-c", _PROBE, str(gw.port), str(stop)],
                                     stdout=subprocess.PIPE, text=True)
            opened = time.perf_counter()
            try:
                results = asyncio.run(_load(gw.url, run_ids))
            finally:
                stop.touch()
                timed = json.loads(probe.communicate(timeout=60)[0] or "[]")
            probes = [ms for _, ms in timed]
            # When the slow answers came: during the first seconds (1,000 streams opening at
            # once) or later, while the streams sit idle and end.
            slow_at = [round(t - opened, 1) for t, ms in timed if ms > 100]
            stored = {rid: [i.decode() for i, _ in cl.redis().xrange(d.keys.run_events(rid))] for rid in run_ids}
        finally:
            gw.stop()
    ok = [r for r in results if isinstance(r, dict)]
    errors = [f"{type(r).__name__}: {r}"[:200] for r in results if isinstance(r, BaseException)]
    return {
        "clients": CLIENTS, "runs": RUNS, "quiet_s": QUIET, "keepalive_s": KEEPALIVE,
        "done_received": sum(r["done"] for r in ok),
        "all_events_received": sum(r["ids"] == stored[r["run_id"]] for r in ok),
        "min_keepalives": min((r["keepalives"] for r in ok), default=0),
        "errors": len(errors), "error_sample": errors[:3],
        "healthz_over_100ms_at_s": slow_at[:20],
        "healthz_p99_ms_after_10s": round(pct([ms for t, ms in timed if t - opened > 10], 99), 1),
        "healthz_probes": len(probes), "healthz_p50_ms": round(pct(probes, 50), 1),
        "healthz_p99_ms": round(pct(probes, 99), 1), "healthz_max_ms": round(max(probes, default=0), 1),
    }
