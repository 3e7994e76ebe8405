"""P7 — flow control against a provider that enforces its limits.

    .venv/bin/python -m bench.p7 [--runs 500] [--rpm 600] [--tpm 60000] [--no-compare]

500 three-turn runs (3 loop turns + the streamed synthesis = 4 LLM calls each) against the
scripted server in enforcing mode (600 RPM / 60,000 TPM over a sliding 60 s window, 429 with
``Retry-After`` beyond), on 2 worker processes × 8 threads, twice:

* **limits on**: the registry entry says ``rpm``/``tpm`` = the provider's. Targets: achieved
  request rate ≥ 95 % of the RPM limit, provider 429s ≤ 1 % of calls, and no worker slot held
  while waiting: the tasks running (sampled every 0.25 s from the lease table, one lease per
  running task) stay far below the runs waiting for capacity (the limiter's waiting lines).
* **limits off** (the same load, no limits in the registry): its 429 count and makespan.

Each reply reports 90 tokens of usage (so 600 calls/min are 54,000 tokens: RPM binds).
Self-contained: its own Redis, server (in this process, for its request log) and workers;
prints one JSON line per scenario and a summary line; not part of ``make test``/``make bench``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench.cluster import Cluster, WorkerSpec
from bench.script import Scenario
from bench.script import handler as bench_handler
from reactq.dispatcher.client import Dispatcher
from reactq.shared.keys import LEASE_SHARDS, Keys
from reactq.shared.requests import RunRequest
from tests.scripted_server import Reply, ScriptedServer

USAGE = {"prompt_tokens": 70, "completion_tokens": 20, "total_tokens": 90}
SPEC = WorkerSpec(count=2, pool="threads", concurrency=8)


def handler(request: dict[str, Any]) -> Reply:
    return bench_handler(request).with_options(usage=USAGE)


def _registry(path: Path, base_url: str, limits: dict[str, int]) -> Path:
    lines = ["[models.scripted]", 'model = "scripted"', f'base_url = "{base_url}"',
             'roles = ["general", "fast", "reasoning", "smart"]',
             "abilities = { tool_call = true, json_mode = true }"]
    lines += [f"{k} = {v}" for k, v in limits.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


class Sampler(threading.Thread):
    """Tasks running (leases held) and runs waiting for capacity, every ``period`` s."""

    def __init__(self, cl: Cluster, period: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.r = cl.redis()
        self.period = period
        self.samples: list[tuple[int, int]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.period):
            pipe = self.r.pipeline(transaction=False)
            for n in range(LEASE_SHARDS):
                pipe.hkeys(Keys().lease_tasks_of(n))
            pipe.zcard("reactq:flow:{scripted}:line:interactive")
            pipe.zcard("reactq:flow:{scripted}:line:batch")
            *shards, wi, wb = pipe.execute()
            running = sum(len(m) for m in shards)  # tasks holding a lease (waiting runs hold none)
            self.samples.append((running, int(wi) + int(wb)))


def scenario(cl: Cluster, server: ScriptedServer, *, runs: int, rpm: int, tpm: int,
             limited: bool, timeout: float) -> dict[str, Any]:
    server.enforce(rpm, tpm)
    server.clear()
    cl.flush()
    r = cl.redis()
    for key in r.scan_iter(match="reactq:flow:*"):
        r.unlink(key)
    limits = {"rpm": rpm, "tpm": tpm} if limited else {}
    models = _registry(cl.tmp / f"models-{uuid.uuid4().hex[:6]}.toml", server.base_url, limits)
    cl.start_workers(WorkerSpec(SPEC.count, SPEC.pool, SPEC.concurrency, env={"REACTQ_MODELS": str(models)}))
    d = Dispatcher(cl.settings(models=models))
    query = Scenario(turns=3).query()
    sampler = Sampler(cl)
    sampler.start()
    t0 = time.time()
    ids = [d.submit(RunRequest(query=query, priority="batch", completion_check=False)).run_id
           for _ in range(runs)]
    statuses = _wait(d, ids, t0 + timeout)
    t1 = time.time()
    sampler.stopped.set()
    sampler.join()
    log = server.requests
    ok = [x for x in log if x.status == 200]
    limited_429 = [x for x in log if x.status == 429]
    first, last = min(x.received_at for x in ok), max(x.received_at for x in ok)
    achieved = (len(ok) - 1) / (last - first) * 60 if last > first else 0.0
    waiting = [(run, wait) for run, wait in sampler.samples if wait > 0]
    return {
        "scenario": "limits on" if limited else "limits off", "runs": runs,
        "succeeded": sum(1 for s in statuses if s == "succeeded"),
        "calls_ok": len(ok), "provider_429": len(limited_429),
        "429_pct": round(100 * len(limited_429) / max(1, len(log)), 2),
        "achieved_rpm": round(achieved, 1), "rpm_limit": rpm,
        "achieved_pct": round(100 * achieved / rpm, 1), "makespan_s": round(t1 - t0, 1),
        "slots": SPEC.slots,
        "tasks_running_while_waiting": {
            "mean": round(statistics.fmean(x for x, _ in waiting), 2) if waiting else None,
            "max": max((x for x, _ in waiting), default=None)},
        "runs_waiting": {"mean": round(statistics.fmean(w for _, w in waiting), 1) if waiting else 0,
                         "max": max((w for _, w in waiting), default=0)},
    }


def _wait(d: Dispatcher, ids: list[str], deadline: float) -> list[str]:
    while True:
        pipe = d.redis.pipeline(transaction=False)
        for rid in ids:
            pipe.hget(d.keys.run(rid), "status")
        statuses = [(s or b"").decode() for s in pipe.execute()]
        if all(s in ("succeeded", "failed", "cancelled") for s in statuses) or time.time() > deadline:
            return statuses
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.p7", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--rpm", type=int, default=600)
    parser.add_argument("--tpm", type=int, default=60_000)
    parser.add_argument("--no-compare", action="store_true", help="skip the limits-off run")
    parser.add_argument("--timeout", type=float, default=900.0, help="per scenario, seconds")
    args = parser.parse_args(argv)
    server = ScriptedServer(handler, rpm=args.rpm, tpm=args.tpm).start()
    out: dict[str, Any] = {"id": "P7"}
    try:
        with Cluster() as cl:
            on = scenario(cl, server, runs=args.runs, rpm=args.rpm, tpm=args.tpm, limited=True,
                          timeout=args.timeout)
            print(json.dumps(on), flush=True)
            out["limits_on"] = on
            if not args.no_compare:
                off = scenario(cl, server, runs=args.runs, rpm=args.rpm, tpm=args.tpm, limited=False,
                               timeout=args.timeout)
                print(json.dumps(off), flush=True)
                out["limits_off"] = off
    finally:
        server.stop()
    running, waiting = on["tasks_running_while_waiting"]["mean"], on["runs_waiting"]["mean"]
    # Far more runs wait than there are slots, and still most slots are free: the waiting
    # runs hold none (a slot is busy only for a call, a tool, or a wait of ≤ 0.25 s + 0.5 s).
    out["met"] = {"rate_ge_95pct": on["achieved_pct"] >= 95.0, "429_le_1pct": on["429_pct"] <= 1.0,
                  "no_slot_held_while_waiting": running is not None and waiting >= 2 * SPEC.slots
                  and running <= SPEC.slots / 2,
                  "all_succeeded": on["succeeded"] == on["runs"]}
    print(json.dumps(out), flush=True)
    path = Path(__file__).parent / "results" / f"{time.strftime('%Y-%m-%dT%H%M%SZ', time.gmtime())}-P7.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    return 0 if all(out["met"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
