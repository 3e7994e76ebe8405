"""P1–P6 on real workers (P1b, the in-process figure, is in ``bench.inproc``)."""

from __future__ import annotations

import time
from typing import Any

from bench import floors
from bench.cluster import Cluster, WorkerSpec
from bench.report import Figure, median, percentile
from bench.runs import run_watched, throughput
from bench.script import Scenario
from reactq.dispatcher.client import Dispatcher
from reactq.shared.keys import Keys


def task_totals(d: Dispatcher) -> dict[str, int]:
    """Tasks each name has run on the current workers since they started."""
    stats = d.celery.control.inspect(timeout=2.0).stats() or {}
    out: dict[str, int] = {}
    for s in stats.values():
        for name, n in (s.get("total") or {}).items():
            out[name] = out.get(name, 0) + int(n)
    return out


# --------------------------------------------------------------------------- P1
def p1(cl: Cluster, d: Dispatcher, repeats: int, llm: dict[str, float]) -> Figure:
    """Marginal cost of one more turn (LLM reply with 1 echo call → tool task → fan-in),
    against the marginal cost of two more hops of a trivial-task chain."""
    r = cl.redis()
    short, long = 2, 12
    turns, chain, cpu_turn, cpu_chain = [], [], [], []

    def timed(fn: Any) -> tuple[float, dict[str, float]]:
        before = cl.cpu_s()
        wall = fn()
        after = cl.cpu_s()
        return wall, {k: after[k] - before[k] for k in after}

    for _ in range(repeats):
        a, ca = timed(lambda: run_watched(d, Scenario(turns=short)).wall * 1000)
        b, cb = timed(lambda: run_watched(d, Scenario(turns=long)).wall * 1000)
        turns.append((b - a) / (long - short))
        cpu_turn.append({k: (cb[k] - ca[k]) * 1000 / (long - short) for k in ca})
        fa, fca = timed(lambda: floors.chain_ms(d, r, 2 * short))
        fb, fcb = timed(lambda: floors.chain_ms(d, r, 2 * long))
        chain.append((fb - fa) / (long - short))
        cpu_chain.append({k: (fcb[k] - fca[k]) * 1000 / (long - short) for k in fca})
    turn_ms = median(turns)
    return Figure(
        "P1", "overhead per turn on workers (wall − raw LLM HTTP time), 1 tool a turn, zero-latency LLM",
        turn_ms - llm["raw_http_ms"], "ms", floor=median(chain), target=1.5, repeats=repeats,
        details={"turn_wall_ms": turn_ms, "llm_raw_http_ms": llm["raw_http_ms"],
                 "openai_sdk_chat_ms": llm["openai_chat_ms"], "llm_request_bytes": llm["request_bytes"],
                 "turn_wall_samples_ms": turns, "floor_samples_ms": chain,
                 "cpu_ms_per_turn": {k: median([c[k] for c in cpu_turn]) for k in cpu_turn[0]},
                 "floor_cpu_ms_per_2_hops": {k: median([c[k] for c in cpu_chain]) for k in cpu_chain[0]},
                 "floor_what": "2 hops of a bench.hop chain (runs → tools queue), marginal",
                 "workers": cl.spec.describe(),
                 "method": f"(run of {long} turns − run of {short}) / {long - short}"})


# --------------------------------------------------------------------------- P2
def _tool_phase_ms(w: Any) -> float:
    """From the first tool's start event to the next turn's thinking-start event."""
    start = w.first("step", type="iteration", status="start")
    nxt = w.first("step", after=start, type="thinking", status="start")
    return (nxt - start) * 1000


def p2(cl: Cluster, d: Dispatcher, repeats: int, seconds: float = 0.2) -> Figure:
    eight, one = [], []
    for _ in range(repeats):
        eight.append(_tool_phase_ms(run_watched(d, Scenario(turns=2, calls=8, tool="sleep", sleep=seconds))))
        one.append(_tool_phase_ms(run_watched(d, Scenario(turns=2, calls=1, tool="sleep", sleep=seconds))))
    value = median(eight)
    return Figure(
        "P2", f"one turn with 8 tool calls of {seconds * 1000:.0f} ms (tool phase, event to event)",
        value, "ms", floor=median(one), target=1.25, repeats=repeats,
        details={"vs_ideal": value / (seconds * 1000), "samples_ms": eight, "floor_samples_ms": one,
                 "floor_what": f"the same turn with 1 call of {seconds * 1000:.0f} ms",
                 "workers": cl.spec.describe(), "tool_slots": cl.spec.slots})


# --------------------------------------------------------------------------- P3
def p3_floor(cl: Cluster, d: Dispatcher, n: int, repeats: int) -> dict[str, Any]:
    r = cl.redis()
    samples = [floors.noop_tasks_per_s(d, r, n)["tasks_per_s"] for _ in range(repeats)]
    return {"tasks_per_s": median(samples), "samples": samples, "tasks": n}


def p3(cl: Cluster, d: Dispatcher, n: int, repeats: int, floor: dict[str, Any],
       tasks_per_run: float, timeout: float) -> Figure:
    r = cl.redis()
    before = task_totals(d)
    results = [throughput(d, r, Scenario(turns=3), n, timeout) for _ in range(repeats)]
    after = task_totals(d)
    reactq_tasks = sum(v - before.get(k, 0) for k, v in after.items() if k.startswith("reactq."))
    measured_tpr = reactq_tasks / (n * repeats) if reactq_tasks else tasks_per_run
    rate = median([x["runs_per_s"] for x in results])
    floor_runs = floor["tasks_per_s"] / tasks_per_run
    return Figure(
        f"P3@{n}", f"throughput of {n} 3-turn runs (zero-latency LLM), submitted at once",
        rate, "runs/s", floor=floor_runs, target=0.5, rule="ratio>=", repeats=repeats,
        details={"floor_tasks_per_s": floor["tasks_per_s"], "tasks_per_run": tasks_per_run,
                 "tasks_per_run_measured": measured_tpr,
                 "makespan_s": median([x["makespan_s"] for x in results]),
                 "submit_s": median([x["submit_s"] for x in results]),
                 "statuses": results[-1]["statuses"], "workers": cl.spec.describe()})


# --------------------------------------------------------------------------- P4
def p4(cl: Cluster, d: Dispatcher, spec: WorkerSpec, n: int, llm_delay: float, fig_id: str,
       turns: int = 3, p3_rate: float = 0.0) -> Figure:
    """Makespan of ``n`` runs submitted at once against Little's law. When the workers'
    CPU cannot process ``n`` runs within that time, P3's throughput bounds it instead:
    ``n / runs_per_s`` (reported as ``throughput_bound_s``)."""
    cl.start_workers(spec)
    r = cl.redis()
    rss_before = sum(cl.worker_rss())
    # One warm run per slot opens the HTTP and Redis connections before the clock starts.
    throughput(d, r, Scenario(turns=2), min(spec.slots, 50), timeout=120)
    bound = max(n * turns * llm_delay / spec.slots, n / p3_rate if p3_rate else 0.0)
    res = throughput(d, r, Scenario(turns=turns, delay=llm_delay), n, timeout=max(120, 3 * bound + 60))
    floor = n * turns * llm_delay / spec.slots
    rss_after = sum(cl.worker_rss())
    return Figure(
        fig_id, f"{n} concurrent {turns}-turn runs, {llm_delay:g} s LLM, {spec.describe()}",
        res["makespan_s"], "s", floor=floor, target=1.3, repeats=1,
        details={"floor_what": f"Little's law: {n} × {turns} × {llm_delay:g} s ÷ {spec.slots} slots",
                 "pool": spec.pool, "slots": spec.slots, "submit_s": res["submit_s"],
                 "statuses": res["statuses"], "worker_rss_mb": rss_after / 2**20,
                 "worker_rss_mb_at_start": rss_before / 2**20,
                 "rss_mb_per_slot": rss_after / 2**20 / spec.slots,
                 "effective_concurrency": n * turns * llm_delay / res["makespan_s"],
                 **({"throughput_bound_s": n / p3_rate, "p3_runs_per_s": p3_rate} if p3_rate else {})})


# --------------------------------------------------------------------------- P5
P5_SCENARIO = Scenario(turns=3, delay=0.02, chunks=20, chunk_delay=0.005)


def _handle_latencies(cl: Cluster, d: Dispatcher, runs: int) -> tuple[list[float], list[float]]:
    """(all events, answer deltas): publish → received by RunHandle.events(), in ms."""
    r = cl.redis()
    all_ms: list[float] = []
    delta_ms: list[float] = []
    for _ in range(runs):
        w = run_watched(d, P5_SCENARIO, prefix="p5")
        published = {int(k): float(v) for k, v in r.hgetall(f"bench:pub:{w.run_id}").items()}
        for at, ev in w.events:
            if ev.seq in published and published[ev.seq] >= w.opened:
                ms = (at - published[ev.seq]) * 1000
                all_ms.append(ms)
                if ev.channel == "answer" and ev.data.get("status") == "delta":
                    delta_ms.append(ms)
    return all_ms, delta_ms


def _p5_figures(prefix: str, consumer: str, all_ms: list[float], delta_ms: list[float],
                floor: list[float], runs: int) -> list[Figure]:
    f50, f99 = median(floor), percentile(floor, 99)
    common = {"events": len(all_ms), "consumer": consumer, "p90_ms": percentile(all_ms, 90),
              "floor_what": "raw XADD → XREAD BLOCK between two processes (p50; p99 for -p99)",
              "floor_samples": len(floor)}
    return [
        Figure(prefix, f"event published by a worker → received by {consumer}, p50",
               median(all_ms), "ms", floor=f50, target=5.0, rule="value<=", repeats=runs, details=common),
        Figure(f"{prefix}-p99", f"event published by a worker → received by {consumer}, p99",
               percentile(all_ms, 99), "ms", floor=f99, rule="info", repeats=runs),
        Figure(f"{prefix}-delta", f"answer token delta published → received by {consumer}, p50",
               median(delta_ms), "ms", floor=f50, target=5.0, rule="value<=", repeats=runs,
               details={"p99_ms": percentile(delta_ms, 99), "deltas": len(delta_ms)}),
    ]


def p5(cl: Cluster, d: Dispatcher, runs: int, floor_n: int) -> list[Figure]:
    floor = floors.xadd_xread_ms(cl.redis_url, floor_n)
    all_ms, delta_ms = _handle_latencies(cl, d, runs)
    figs = _p5_figures("P5", "RunHandle.events() (XREAD BLOCK)", all_ms, delta_ms, floor, runs)
    try:
        import reactq.dispatcher.http  # noqa: F401
    except ImportError:
        return figs + [Figure("P5-sse", "event published by a worker → received by an SSE client of "
                              "the gateway", None, "ms", target=5.0, rule="value<=", status="pending",
                              details={"why": "dispatcher/http.py (the gateway) is not in this checkout"})]
    from bench.sse import sse_latencies

    sse_all, sse_delta = sse_latencies(cl, d, P5_SCENARIO, runs)
    return figs + _p5_figures("P5-sse", "an SSE client of the gateway (reactq.dispatcher.http)",
                              sse_all, sse_delta, floor, runs)


# --------------------------------------------------------------------------- P6
def _run_keys_memory(r: Any, run_ids: list[str]) -> dict[str, float]:
    """Mean MEMORY USAGE per key kind over ``run_ids`` (bytes)."""
    kinds: dict[str, list[int]] = {}
    for rid in run_ids:
        for key in r.scan_iter(match=Keys().run(rid) + "*", count=100):  # braces: literal in SCAN
            name = key.decode()
            rest = name[len(Keys().run(rid)):]
            kind = "hash" if not rest else rest.split(":")[1]
            kinds.setdefault(kind, []).append(int(r.memory_usage(key, samples=0) or 0))
    n = max(1, len(run_ids))
    return {k: sum(v) / n for k, v in kinds.items()}


def _mem_by_prefix(r: Any) -> dict[str, int]:
    """MEMORY USAGE summed per key family (``reactq:run``, ``reactq:metrics``, ``unacked`` …)."""
    out: dict[str, int] = {}
    for key in r.scan_iter(count=1000):
        name = key.decode(errors="replace")
        family = ":".join(name.split(":")[:2]) if name.startswith("reactq:") else name.split(":")[0]
        out[family] = out.get(family, 0) + int(r.memory_usage(key, samples=0) or 0)
    return out


def p6_memory(cl: Cluster, d: Dispatcher, n: int, ttl: int) -> list[Figure]:
    """Memory of ``n`` finished runs (measured while all are younger than ``ttl``), then
    what is left 3 s after the last one's TTL ran out."""
    cl.start_workers(WorkerSpec(env={"REACTQ_RUN_TTL_SECONDS": str(ttl)}))
    r = cl.redis()
    throughput(d, r, Scenario(turns=2), 20, timeout=120)  # warm
    time.sleep(ttl + 2)
    cl.flush()
    base = int(r.info("memory")["used_memory"])
    base_families = _mem_by_prefix(r)
    started = time.time()
    res = throughput(d, r, Scenario(turns=3), n, timeout=600)
    ended = time.time()
    used = int(r.info("memory")["used_memory"])
    families = _mem_by_prefix(r)
    alive = sum(1 for rid in r.zrange("reactq:runs", 0, -1) if r.exists(Keys().run(rid.decode())))
    family_delta = {k: (v - base_families.get(k, 0)) / n for k, v in families.items()
                    if abs(v - base_families.get(k, 0)) >= n}
    sample = [k.decode() for k in r.zrange("reactq:runs", -20, -1)]
    per_kind = _run_keys_memory(r, sample)
    time.sleep(max(0.0, ttl + 3 - (time.time() - ended)))
    left_used = int(r.info("memory")["used_memory"])
    left = list(r.scan_iter(match="reactq:run:*", count=1000))
    ttls = [int(r.ttl(k)) for k in left]
    kinds = sorted({k.decode().split(":")[3] if k.decode().count(":") >= 3 else "hash" for k in left})
    no_ttl = sum(1 for t in ttls if t < 0)
    left_bytes = sum(int(r.memory_usage(k, samples=0) or 0) for k in left)
    return [
        Figure("P6", f"Redis memory per finished 3-turn run (MEMORY USAGE of its keys, {n} runs)",
               family_delta.get("reactq:run", 0.0), "bytes", rule="info", repeats=1,
               details={"by_key_kind": per_kind, "run_index_bytes_per_run": family_delta.get("reactq:runs", 0.0),
                        "other_key_families_per_run": {k: v for k, v in family_delta.items()
                                                       if not k.startswith("reactq:run")},
                        "used_memory_delta_per_run": (used - base) / n,
                        "runs_alive_when_measured": alive, "batch_s": ended - started,
                        "runs_per_s": res["runs_per_s"]}),
        Figure("P6-ttl", f"Redis memory per run {ttl + 3} s after the last run ended (TTL {ttl} s)",
               left_bytes / n, "bytes", rule="check", repeats=1,
               verdict=no_ttl == 0 and max(ttls, default=0) <= 3600,
               details={"target": "every key left expires (≤ 1 h)", "run_keys_left_per_run": len(left) / n,
                        "kinds_left": kinds, "keys_without_ttl": no_ttl,
                        "max_ttl_left_s": max(ttls, default=0),
                        "used_memory_delta_per_run": (left_used - base) / n,
                        "run_index_entries": int(r.zcard("reactq:runs")),
                        "run_index_note": "reactq:runs keeps each id until TTL + 7 days (pruned on submit)"}),
    ]


def p6_rss(checkpoints: list[tuple[int, float]]) -> Figure:
    """Worker RSS (MB, both workers) at cumulative run counts; flat = ≤ 10 % growth from
    the first checkpoint past 100 runs (warm: pools and caches filled) to the last."""
    ref = next(((n, m) for n, m in checkpoints if n >= 100), checkpoints[0])
    last = checkpoints[-1]
    if last[0] - ref[0] < 500:
        return Figure("P6-rss", "worker RSS over many runs", None, "%", target=10.0, rule="value<=",
                      status="skipped", details={"why": "fewer than 500 runs between checkpoints "
                                                        "(run P3 with P6)", "checkpoints_runs_mb": checkpoints})
    growth = (last[1] - ref[1]) / ref[1] if ref[1] else 0.0
    return Figure("P6-rss", f"worker RSS growth from {ref[0]:,} to {last[0]:,} runs",
                  growth * 100, "%", target=10.0, rule="value<=", repeats=1,
                  details={"checkpoints_runs_mb": [[n, round(m, 1)] for n, m in checkpoints],
                           "mb_per_1000_runs": (last[1] - ref[1]) / (last[0] - ref[0]) * 1000})
