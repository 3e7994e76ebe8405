"""Issue 10 item 5: one gateway process serves many quiet SSE watchers at once, and its
liveness probe answers while they watch and while HTTP batches run.

On the old gateway this fails three ways: the async Redis client's 5 s socket timeout cut
every stream quiet for longer (the keep-alive here is 6 s), its 100-connection pool refused
watcher 101, and ``/healthz`` needed Redis and a thread of the default pool that six batch
drivers held.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx2
import pytest

from tests.integration.conftest import worker_env
from tests.integration.test_gateway import start_gateway, stop_gateway
from tests.scripted_server import reply_text

pytestmark = [pytest.mark.integration, pytest.mark.faults]

WATCHERS = 150


async def _watch(client: httpx2.AsyncClient, url: str) -> dict[str, Any]:
    frames, keepalives, cur = [], 0, {}
    async with client.stream("GET", url) as res:
        assert res.status_code == 200, res.status_code
        async for line in res.aiter_lines():
            if line.startswith(":"):
                keepalives += line.strip() == ": keepalive"
            elif line == "":
                if cur:
                    frames.append({"event": cur.get("event"), "data": json.loads(cur["data"])})
                    cur = {}
            else:
                key, _, value = line.partition(":")
                cur[key] = value.lstrip(" ")
    return {"frames": frames, "keepalives": keepalives}


async def _probe(url: str, stop: asyncio.Event) -> list[float]:
    times: list[float] = []
    async with httpx2.AsyncClient(timeout=30) as client:
        while not stop.is_set():
            t0 = time.perf_counter()
            res = await client.get(f"{url}/healthz")
            times.append(time.perf_counter() - t0)
            assert res.status_code == 200, res.text
            await asyncio.sleep(0.2)
    return times


def test_many_quiet_watchers_get_keepalives_every_event_and_done_and_healthz_stays_fast(
        redis_url, llm, workers, tmp_path):
    env = worker_env(redis_url, llm, REACTQ_SSE_KEEPALIVE="6")
    gw = start_gateway(env, tmp_path / "gateway.log", via_cli=False)
    try:
        # The run is quiet for 14 s (a slow LLM), longer than the old 5 s socket timeout.
        q = llm.script(llm.unique("watchers: slow answer"), [reply_text("forty-two").with_options(delay=14)])
        created = httpx2.post(f"{gw.url}/v1/runs", json={"query": q}, timeout=30).json()
        # Six batches of slow runs keep six batch drivers busy meanwhile.
        slow = llm.script(llm.unique("watchers: batch"), [reply_text("ok").with_options(delay=10)])
        for n in range(6):
            body = "\n".join(json.dumps({"query": slow, "idempotency_key": f"b{n}-{i}-{time.time()}"})
                             for i in range(2))
            res = httpx2.post(f"{gw.url}/v1/batches", content=body, timeout=30,
                             headers={"content-type": "application/x-ndjson"})
            assert res.status_code == 202, res.text

        async def main() -> tuple[list[Any], list[float]]:
            stop = asyncio.Event()
            probe = asyncio.create_task(_probe(gw.url, stop))
            limits = httpx2.Limits(max_connections=WATCHERS + 10, max_keepalive_connections=0)
            async with httpx2.AsyncClient(base_url=gw.url, timeout=60, limits=limits) as client:
                results = await asyncio.gather(
                    *(_watch(client, created["events_url"]) for _ in range(WATCHERS)), return_exceptions=True)
            stop.set()
            return results, await probe

        results, probe_times = asyncio.run(main())
    finally:
        stop_gateway(gw)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, f"{len(errors)} watchers failed, e.g. {errors[0]!r}"
    expected = results[0]["frames"]
    assert expected[-1]["event"] == "done" and expected[-1]["data"]["status"] == "succeeded"
    for r in results:
        assert r["frames"] == expected  # every watcher got every event and the done
        assert r["keepalives"] >= 1  # the quiet spell got its keep-alive, the stream was not cut
    # Generous for a loaded 2-core box; bench/faults/f_sse.py measures the real p99.
    assert max(probe_times) < 3.0, sorted(probe_times)[-5:]
