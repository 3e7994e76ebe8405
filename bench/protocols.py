"""``python -m bench.protocols [N]``: what each protocol door adds to a run's latency.

The same run (one tool turn, then the answer: ``Scenario(turns=2)``) made N times through each
door of one gateway (a ``reactq serve`` process) on a 2-worker cluster, the doors interleaved:

* ``runs``: ``POST /v1/runs``, then its SSE stream (``GET /v1/runs/{id}/events``);
* ``runs_on_a_thread``: the same with a ``thread_id`` of its own (as each response's run has);
* ``responses``: ``POST /v1/responses`` with ``stream: true``, through the ``openai`` client;
* ``mcp``: a plain ``reactq_run`` call over streamable HTTP (``/mcp``), through the ``mcp`` client.

For each: p50 of the time from the request to the first event (runs: the run's first SSE
frame, its first turn starting; responses: ``response.created``, sent once the run exists — no
Responses event is made of a turn's start; mcp: the first progress notification, turn 1) and to completion
(the ``done`` frame, ``response.completed``, the tool result), and each door's p50 minus that
of ``runs``. Writes ``bench/results/protocols-<N>.json``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2

from bench.cluster import ROOT, Cluster, WorkerSpec
from bench.script import Scenario
from reactq.shared.redisconn import free_port


def _gateway(c: Cluster) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "dispatcher", "serve", "--port", str(port), "--log-level", "warning"],
                            cwd=ROOT, env=c.worker_env({}), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            if httpx2.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx2.TransportError:
            time.sleep(0.1)
    raise RuntimeError("the gateway did not start")


def via_runs(http: httpx2.Client, query: str, thread: bool = False) -> tuple[float, float]:
    t0 = time.perf_counter()
    body: dict[str, Any] = {"query": query}
    if thread:  # as a response's run is: on a thread of its own
        body["thread_id"] = f"bench.{time.perf_counter_ns()}"
    run_id = http.post("/v1/runs", json=body).json()["run_id"]
    first = None
    with http.stream("GET", f"/v1/runs/{run_id}/events") as res:
        for line in res.iter_lines():
            if line.startswith("event:") and first is None:
                first = time.perf_counter() - t0
            if line == "event: done":
                break
    assert first is not None
    return first, time.perf_counter() - t0


def via_responses(client: Any, query: str) -> tuple[float, float]:
    t0 = time.perf_counter()
    first = None
    for event in client.responses.create(model="scripted", input=query, stream=True):
        if first is None:  # response.created: sent once the run exists, before its first event
            first = time.perf_counter() - t0
        if event.type in ("response.completed", "response.failed"):
            break
    assert first is not None
    return first, time.perf_counter() - t0


async def via_mcp(client: Any, query: str) -> tuple[float, float]:
    t0 = time.perf_counter()
    first: list[float] = []

    async def progress(_: float, __: float | None, ___: str | None) -> None:
        if not first:
            first.append(time.perf_counter() - t0)

    result = await client.call_tool("reactq_run", {"query": query}, progress_callback=progress)
    assert not result.is_error, result
    return first[0], time.perf_counter() - t0


async def _measure(url: str, n: int) -> dict[str, list[tuple[float, float]]]:
    import openai
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    query = Scenario(turns=2, calls=1, tool="echo", tag="protocols").query()
    out: dict[str, list[tuple[float, float]]] = {"runs": [], "runs_on_a_thread": [], "responses": [], "mcp": []}
    oai = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    with httpx2.Client(base_url=url, timeout=60) as http:
        async with httpx2.AsyncClient(timeout=60) as h2, Client(streamable_http_client(f"{url}/mcp", http_client=h2)) as m:
            for _ in range(3):  # warm every path once
                via_runs(http, query), via_responses(oai, query), await via_mcp(m, query)
            for _ in range(n):
                out["runs"].append(await asyncio.to_thread(via_runs, http, query))
                out["runs_on_a_thread"].append(await asyncio.to_thread(via_runs, http, query, True))
                out["responses"].append(await asyncio.to_thread(via_responses, oai, query))
                out["mcp"].append(await via_mcp(m, query))
    return out


def summarize(samples: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
    p50 = {door: (statistics.median(f for f, _ in s) * 1000, statistics.median(d for _, d in s) * 1000)
           for door, s in samples.items()}
    base = p50["runs"]
    return {door: {"first_event_p50_ms": round(f, 1), "completion_p50_ms": round(d, 1),
                   "added_first_event_ms": round(f - base[0], 1), "added_completion_ms": round(d - base[1], 1)}
            for door, (f, d) in p50.items()}


def main(n: int) -> dict[str, Any]:
    with Cluster() as c:
        c.start_workers(WorkerSpec(count=2, pool="threads", concurrency=8))
        proc, url = _gateway(c)
        try:
            out = {"runs_per_door": n, "workers": "2 × threads, concurrency 8", **summarize(asyncio.run(_measure(url, n)))}
        finally:
            proc.terminate()
            proc.wait(10)
    path = Path(__file__).parent / "results" / f"protocols-{n}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50), indent=2))
