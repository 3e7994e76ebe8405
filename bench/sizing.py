"""Sizing figures for ``deploy/README.md``: ``.venv/bin/python -m bench.sizing [--runs N]``.

* **Redis per turn**: N 3-turn runs (LLM → ``echo`` → LLM → ``echo`` → LLM → answer) on the
  bench's default workers (2 processes × threads × 8), LLM instant. Redis's own CPU
  (``/proc``, user + system) and its ``INFO commandstats`` over exactly those runs give
  CPU-ms and commands per turn; one Redis primary is one core (single-threaded command
  loop), so ``1000 / cpu_ms_per_turn`` is the turns/s at which it saturates. The 2 cores
  here cannot drive it that far (the Python workers saturate first), so that figure is the
  measured cost per turn extrapolated to one full core, and ``redis_core_busy`` says how
  busy it actually was.
* **Gateway**: one ``uvicorn`` process; M runs submitted with ``POST /v1/runs`` and each
  followed by its own concurrent SSE client; gateway CPU per request and per event
  delivered, and the Redis connections while the streams are open (the gateway's shared
  stream readers: a few blocking ``XREAD`` for all its streams, not one per stream).

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import urllib.request
from typing import Any

from bench.cluster import Cluster, WorkerSpec, _cpu
from bench.runs import request, submit_many, throughput, wait_all
from bench.script import Scenario
from bench.sse import Gateway
from reactq.dispatcher.client import Dispatcher


def redis_per_turn(cl: Cluster, runs: int, broker: str | None = None) -> dict[str, Any]:
    d = Dispatcher(cl.settings(broker_url=broker))
    r = cl.redis()
    sc = Scenario(turns=3)
    throughput(d, r, sc, 20, timeout=120)  # warm the workers' connections and scripts
    r.config_resetstat()
    c0 = cl.cpu_s()
    t0 = time.time()
    ids = submit_many(d, sc, runs)
    # Polled every 2 s only: the bench's own HMGETs would otherwise count as reactq's load.
    res = {"makespan_s": wait_all(r, ids, timeout=900, poll=2.0)["last_updated"] - t0}
    c1 = cl.cpu_s()
    turns = runs * sc.turns
    stats = r.info("commandstats")
    calls = sum(int(v["calls"]) for v in stats.values())
    usec = sum(int(v["usec"]) for v in stats.values())
    top = sorted(stats.items(), key=lambda kv: -int(kv[1]["usec"]))[:10]
    redis_cpu = c1["redis"] - c0["redis"]
    ms_per_turn = redis_cpu * 1000 / turns
    return {
        "runs": runs, "turns": turns, "makespan_s": round(res["makespan_s"], 2),
        "turns_per_s": round(turns / res["makespan_s"], 1),
        "redis_cpu_s": round(redis_cpu, 2), "redis_core_busy": round(redis_cpu / res["makespan_s"], 3),
        "redis_cpu_ms_per_turn": round(ms_per_turn, 3),
        "redis_cmds_per_turn": round(calls / turns, 1),
        "redis_cmd_usec_per_turn": round(usec / turns, 1),
        "saturation_turns_per_s_one_core": round(1000 / ms_per_turn) if ms_per_turn else None,
        "workers_cpu_ms_per_turn": round((c1["workers"] - c0["workers"]) * 1000 / turns, 2),
        "top_commands_by_usec": {k.removeprefix("cmdstat_"): {"calls": int(v["calls"]), "usec": int(v["usec"])}
                                 for k, v in top},
        "used_memory_bytes": int(r.info("memory")["used_memory"]),
    }


def gateway(cl: Cluster, clients: int) -> dict[str, Any]:
    gw = Gateway(cl)
    try:
        sc = Scenario(turns=3, delay=0.2)  # runs last ~1 s: the streams are open concurrently
        body = json.dumps(request(sc)).encode()
        url = f"http://127.0.0.1:{gw.port}/v1/runs"
        post = lambda: json.loads(urllib.request.urlopen(urllib.request.Request(  # noqa: E731
            url, data=body, headers={"Content-Type": "application/json"}), timeout=30).read())["run_id"]
        post()  # warm
        c0 = _cpu(gw.proc.pid)
        t0 = time.perf_counter()
        ids = [post() for _ in range(clients)]
        post_s = time.perf_counter() - t0
        c1 = _cpu(gw.proc.pid)
        events = [0] * clients

        def follow(i: int) -> None:
            _, frames = gw.watch(ids[i], timeout=300)
            events[i] = len(frames)

        threads = [threading.Thread(target=follow, args=(i,)) for i in range(clients)]
        t1 = time.perf_counter()
        for t in threads:
            t.start()
        time.sleep(0.5)
        conns = int(cl.redis().info("clients")["connected_clients"])
        # Blocked stream reads: the gateway's watchers share a few (dispatcher/http/hub.py),
        # where one per open stream would be as many as the streams.
        xreads = sum(1 for c in cl.redis().client_list() if c.get("cmd") == "xread")
        for t in threads:
            t.join()
        sse_s = time.perf_counter() - t1
        c2 = _cpu(gw.proc.pid)
        n_events = sum(events)
        return {
            "clients": clients, "post_per_s_one_client": round(clients / post_s, 1),
            "gateway_cpu_ms_per_post": round((c1 - c0) * 1000 / clients, 2),
            "events_delivered": n_events, "sse_wall_s": round(sse_s, 2),
            "gateway_cpu_ms_per_event": round((c2 - c1) * 1000 / max(1, n_events), 3),
            "redis_connected_clients_while_streaming": conns, "xread_clients_while_streaming": xreads,
        }
    finally:
        gw.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--rabbitmq", action="store_true",
                    help="also measure with the broker on a vhost of the local RabbitMQ (state only on Redis)")
    args = ap.parse_args()
    out: dict[str, Any] = {}
    with Cluster() as cl:
        cl.start_workers(WorkerSpec())
        out["redis"] = redis_per_turn(cl, args.runs)
        cl.flush()
        if args.clients:
            out["gateway"] = gateway(cl, args.clients)
        if args.rabbitmq:
            from tests.backends import RabbitVhosts

            vhosts = RabbitVhosts("reactq-sizing")
            try:
                url = vhosts.url()
                # Every client of the bench cluster (its readiness ping too) uses that broker.
                cl.settings = lambda **o: Cluster.settings(cl, **{"broker_url": url, **o})  # type: ignore[method-assign]
                cl.start_workers(WorkerSpec(env={"REACTQ_BROKER_URL": url}))
                cl.flush()
                out["redis_state_only_broker_rabbitmq"] = redis_per_turn(cl, args.runs, broker=url)
                cl.stop_workers()
            finally:
                vhosts.delete_all()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
