"""``python -m bench.keyscost [REPEATS]``: what API keys and pricing cost, each against the
same thing without them, interleaved on the same processes.

* **P1-priced**: the marginal turn of P1 (run of 12 turns − run of 2, ÷ 10) on a model of the
  registry with a ``price``, against the same model without one (both are the scripted
  server); the priced runs belong to a tenant with a ``cost_per_day_usd`` cap, so every call
  is reserved against the tenant's day and settled (the whole path). Median of the pairs.
* **P5-sse-keys**: P5-sse (worker publishes → the gateway's SSE client receives, p50) through
  a gateway with ``REACTQ_API_TOKEN`` set, read with a tenant's scoped key, against a gateway
  without keys; both gateways run at once and the runs alternate between them.

Writes ``bench/results/keyscost.json``.
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.cluster import Cluster, WorkerSpec
from bench.runs import request
from bench.script import Scenario
from bench.sse import Gateway
from reactq.dispatcher.client import Dispatcher
from reactq.shared.stores.keys import ApiKeyStore

WORKERS = WorkerSpec(count=2, pool="threads", concurrency=8, env={"BENCH_PUBTIMES": "1"})
SHORT, LONG = 2, 12
REGISTRY = """\
[models.plain]
model = "scripted"
base_url = "{url}"
api_key_env = "OPENAI_API_KEY"
roles = ["general"]
abilities = {{ tool_call = true }}

[models.priced]
model = "scripted"
base_url = "{url}"
api_key_env = "OPENAI_API_KEY"
abilities = {{ tool_call = true }}
price = {{ input_per_mtok = 0.15, output_per_mtok = 0.60, cached_input_per_mtok = 0.075 }}
"""
TENANTS = '[tenants.priced]\ncost_per_day_usd = 1000.0\n'


def marginal_turn_ms(d: Dispatcher, model: str, tenant: str) -> float:
    def wall(turns: int) -> float:
        t0 = time.perf_counter()
        h = d.submit({**request(Scenario(turns=turns)), "model": model}, run_id=f"k{uuid.uuid4().hex}",
                     tenant=tenant)
        return until_done(d, h.run_id, t0)

    return (wall(LONG) - wall(SHORT)) * 1000 / (LONG - SHORT)


def until_done(d: Dispatcher, run_id: str, t0: float) -> float:
    """Seconds from ``t0`` (its submit) until the run's ``done``."""
    for _, ev in d.handle(run_id).events(block_ms=1000, timeout=120):
        if ev.channel == "done":
            if ev.data.get("status") != "succeeded":
                raise RuntimeError(f"run {run_id} ended {ev.data}")
            return time.perf_counter() - t0
    raise TimeoutError(f"run {run_id} did not finish")


def sse_p50_pairs(cl: Cluster, d: Dispatcher, runs: int, key: str, admin: str) -> dict[str, list[float]]:
    open_gw = Gateway(cl)
    keyed_gw = Gateway(cl, env={"REACTQ_API_TOKEN": admin})
    r = cl.redis()
    out: dict[str, list[float]] = {"open": [], "keys": []}
    sc = Scenario(turns=2, chunks=20, chunk_delay=0.005, delay=0.05)
    try:
        for i in range(2 * runs + 2):
            which, gw, auth = (("open", open_gw, None) if i % 2 == 0 else ("keys", keyed_gw, key))
            run_id = f"p5{uuid.uuid4().hex}"
            d.submit({**request(sc), "model": "priced"}, run_id=run_id, tenant="priced")
            opened, frames = gw.watch(run_id, auth=auth)
            published = {int(k): float(v) for k, v in r.hgetall(f"bench:pub:{run_id}").items()}
            if i < 2:
                continue  # each gateway's first run warms its connections
            out[which] += [(at - published[seq]) * 1000 for at, seq, _, _ in frames
                           if seq in published and published[seq] >= opened]
    finally:
        open_gw.stop()
        keyed_gw.stop()
    return out


def get_pairs(cl: Cluster, d: Dispatcher, n: int, key: str, admin: str) -> dict[str, list[float]]:
    """``GET /v1/runs/{id}`` round trips (ms) on a keep-alive connection, alternating between a
    gateway without keys and one with them (the request carries a tenant's key)."""
    run_id = f"g{uuid.uuid4().hex}"
    h = d.submit({**request(Scenario(turns=2)), "model": "priced"}, run_id=run_id, tenant="priced")
    until_done(d, h.run_id, time.perf_counter())
    gws = {"open": Gateway(cl), "keys": Gateway(cl, env={"REACTQ_API_TOKEN": admin})}
    out: dict[str, list[float]] = {"open": [], "keys": []}
    try:
        conns = {k: http.client.HTTPConnection("127.0.0.1", g.port, timeout=10) for k, g in gws.items()}
        headers = {"open": {}, "keys": {"Authorization": f"Bearer {key}"}}
        for i in range(2 * n + 20):
            which = "open" if i % 2 == 0 else "keys"
            t0 = time.perf_counter()
            conns[which].request("GET", f"/v1/runs/{run_id}", headers=headers[which])
            resp = conns[which].getresponse()
            resp.read()
            if resp.status != 200:
                raise RuntimeError(f"GET through the {which} gateway answered {resp.status}")
            if i >= 20:  # the first requests warm each gateway
                out[which].append((time.perf_counter() - t0) * 1000)
    finally:
        for g in gws.values():
            g.stop()
    return out


def main(repeats: int = 7, sse_runs: int = 10) -> dict[str, Any]:
    with Cluster() as cl:
        registry = cl.tmp / "models.toml"
        registry.write_text(REGISTRY.format(url=cl.llm_url))
        tenants = cl.tmp / "tenants.toml"
        tenants.write_text(TENANTS)
        env = {**WORKERS.env, "REACTQ_MODELS": str(registry), "REACTQ_TENANTS": str(tenants)}
        cl.start_workers(WorkerSpec(count=2, pool="threads", concurrency=8, env=env))
        d = Dispatcher(cl.settings(models=registry, tenants=tenants))
        for model, tenant in (("plain", "default"), ("priced", "priced")):
            marginal_turn_ms(d, model, tenant)  # warm-up
        plain, priced = [], []
        for _ in range(repeats):
            plain.append(marginal_turn_ms(d, "plain", "default"))
            priced.append(marginal_turn_ms(d, "priced", "priced"))
        spent = cl.redis().hgetall(next(iter(cl.redis().scan_iter(match="reactq:tenant:*spend*"))))
        admin = "bench-admin-" + uuid.uuid4().hex
        key = ApiKeyStore(cl.redis()).create("priced", "runs:read,runs:write", "bench")["key"]
        sse = sse_p50_pairs(cl, d, sse_runs, key, admin)
        gets = get_pairs(cl, d, 500, key, admin)
    out = {
        "P1-priced": {
            "what": "marginal turn (12 − 2 turns) / 10, priced model under a tenant's daily cap vs unpriced",
            "value_ms": round(statistics.median(priced), 2), "floor_ms": round(statistics.median(plain), 2),
            "ratio": round(statistics.median(priced) / statistics.median(plain), 3),
            "samples_priced_ms": [round(x, 2) for x in priced], "samples_plain_ms": [round(x, 2) for x in plain],
            "tenant_day_spend": {k.decode(): v.decode() for k, v in spent.items() if not k.startswith(b"r:")},
        },
        "P5-sse-keys": {
            "what": "publish → SSE client p50, gateway with API keys (tenant key) vs without",
            "value_ms": round(statistics.median(sse["keys"]), 2), "floor_ms": round(statistics.median(sse["open"]), 2),
            "ratio": round(statistics.median(sse["keys"]) / statistics.median(sse["open"]), 3),
            "p99_keys_ms": round(sorted(sse["keys"])[int(0.99 * (len(sse["keys"]) - 1))], 2),
            "p99_open_ms": round(sorted(sse["open"])[int(0.99 * (len(sse["open"]) - 1))], 2),
            "events": {k: len(v) for k, v in sse.items()},
        },
        "GET-run-keys": {
            "what": "GET /v1/runs/{id} round trip p50, gateway with API keys (tenant key) vs without",
            "value_ms": round(statistics.median(gets["keys"]), 3),
            "floor_ms": round(statistics.median(gets["open"]), 3),
            "ratio": round(statistics.median(gets["keys"]) / statistics.median(gets["open"]), 3),
            "requests_each": len(gets["keys"]),
        },
        "repeats": repeats, "sse_runs_each": sse_runs, "workers": WORKERS.describe(),
        "load_avg_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
    }
    path = Path(__file__).parent / "results" / "keyscost.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    print(json.dumps(main(*[int(a) for a in sys.argv[1:]]), indent=2))
