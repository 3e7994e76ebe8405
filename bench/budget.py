"""Where a turn goes: every Redis command and every millisecond of worker CPU, by origin,
beside the floor's two bare Celery hops.

    python -m bench.budget                   # one JSON line, and the tables
    python -m bench.budget --profile         # also a py-spy profile of the workers (P1- and P3-like)

Runs like P1's (one ``echo`` call per turn, ``completion_check`` off) of 12 and of 2 turns, one
at a time on 2 threads-pool workers; a turn is (12-turn − 2-turn) / 10 per run, a floor's two
hops (chain of 24 − chain of 4) / 10. Three passes:

* **commands** (deterministic): the server's ``MONITOR`` stream, each command attributed to its
  origin — a reactq Lua script by name (with the commands it runs inside), a reactq key, kombu's
  publish / consume / ack bookkeeping, Celery's task events, the control box. Only the workers'
  connections count (the bench process's own polling is left out, by the connection's pid).
* **CPU** (no ``MONITOR``): the workers' CPU from ``/proc`` and the server's from ``INFO cpu``.
* **profile** (``--profile``): ``py-spy record --gil`` on both workers while P1-like runs and a
  P3-like burst run; each sample goes to the first owner on its stack, root side first
  (``OWNERS``), so what a step's Redis call costs in redis-py counts under the step's phase.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis

from bench import floors
from bench.cluster import Cluster, WorkerSpec
from bench.report import Figure
from bench.runs import run_watched, submit_many, wait_all
from bench.script import Scenario
from reactq.dispatcher.client import Dispatcher

RUNS = 5
SHORT, LONG = 2, 12
SCRIPT_MODULES = (
    "reactq.shared.stores.runs_lua", "reactq.shared.stores.streams", "reactq.shared.stores.flow",
    "reactq.shared.stores.spend", "reactq.shared.stores.threads", "reactq.shared.stores.active",
    "reactq.shared.stores.approvals", "reactq.shared.stores.approvals_lua", "reactq.shared.stores.dags",
    "reactq.shared.stores.webhooks", "reactq.workers.recovery.lease", "reactq.workers.recovery.watchdog",
    "reactq.shared.stores.crashes", "reactq.shared.stores.calls",
)
_LINE = re.compile(r'^[\d.]+ \[\d+ ([^\]]+)\] (.*)$')
_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')
_ID = re.compile(r"[0-9a-f]{16,}|call_[A-Za-z0-9]+|\d{3,}")


def script_names() -> dict[str, str]:
    """sha1 of every Lua script reactq registers → ``module.NAME``."""
    out: dict[str, str] = {}
    for mod_name in SCRIPT_MODULES:
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            continue
        for name, value in vars(mod).items():
            if isinstance(value, str) and "redis.call" in value:
                out[hashlib.sha1(value.encode()).hexdigest()] = f"{mod_name.rsplit('.', 1)[1]}.{name}"
    return out


def unrepr(arg: str) -> str:
    """An argument as ``MONITOR`` prints it (``sdscatrepr``), unescaped."""
    if "\\" not in arg:
        return arg
    out = re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), arg.replace("\\\\", "\0"))
    for esc, ch in (("n", "\n"), ("r", "\r"), ("t", "\t"), ("a", "\a"), ("b", "\b"), ('"', '"')):
        out = out.replace("\\" + esc, ch)
    return out.replace("\0", "\\")


def origin(cmd: str, args: list[str], scripts: dict[str, str]) -> str:
    """What sent a top-level command, from its name and first key."""
    if cmd == "eval":
        args = [hashlib.sha1(args[0].encode("latin-1", "replace")).hexdigest(), *args[1:]]
    if cmd in ("evalsha", "eval"):
        return f"script {scripts.get(args[0], args[0][:8])}"
    key = args[0] if args else ""
    if cmd == "publish":
        return "celery task events" if "celeryev" in key else f"publish {key[:20]}"
    if key.startswith("_kombu.binding"):
        return "kombu publish: binding lookup"
    if key.startswith(("reactq.runs", "reactq.tools", "reactq.webhooks")):
        return f"kombu {'publish' if cmd == 'lpush' else 'consume'}: {cmd}"
    if cmd == "brpop":
        return "kombu consume: brpop"
    if key.startswith("unacked"):
        return "kombu ack bookkeeping"
    if "pidbox" in key or "reply.celery" in key:
        return "celery control"
    if key.startswith("reactq:"):
        return f"reactq {_ID.sub('{id}', key.split(':', 2)[1] if key.count(':') > 1 else key)}"
    return "other"


def parse_monitor(path: Path, pids_of: dict[str, int], workers: set[int],
                  scripts: dict[str, str]) -> Counter[tuple[str, str]]:
    """(origin, command) → count, for the workers' connections (a script's inner commands
    count under the script)."""
    counts: Counter[tuple[str, str]] = Counter()
    last_script: str | None = None
    pending_multi: dict[str, int] = {}
    for line in path.read_text(errors="replace").splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        client, rest = m.groups()
        args = [unrepr(a) for a in _ARG.findall(rest)]
        if not args:
            continue
        cmd = args[0].lower()
        if client == "lua":
            if last_script is not None:
                counts[(last_script, cmd)] += 1
            continue
        if pids_of.get(client.rsplit(":", 1)[1]) not in workers:
            last_script = None
            continue
        if cmd == "multi":
            pending_multi[client] = pending_multi.get(client, 0) + 1
            continue
        what = origin(cmd, args[1:], {k: v for k, v in scripts.items()})
        if cmd == "exec":
            what = "transaction (multi/exec)"
            counts[(what, "multi")] += pending_multi.pop(client, 0)
        counts[(what, cmd)] += 1
        last_script = what if cmd in ("evalsha", "eval") else None
    return counts


def socket_pids() -> dict[str, int]:
    """Local TCP port → pid, for every connection on this host (``ss -tnp``)."""
    out = subprocess.run(["ss", "-tnpH"], capture_output=True, text=True).stdout
    ports: dict[str, int] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 6:
            continue
        local = parts[3].rsplit(":", 1)[1]
        m = re.search(r"pid=(\d+)", line)
        if m:
            ports[local] = int(m.group(1))
    return ports


def _worker_pids(c: Cluster) -> set[int]:
    from bench.cluster import _tree

    return {pid for w in c.workers for pid in _tree(w.proc.pid)}


def _runs(d: Dispatcher, turns: int, n: int) -> None:
    for _ in range(n):
        run_watched(d, Scenario(turns=turns))


def _chains(d: Dispatcher, r: redis.Redis, hops: int, n: int) -> None:
    for _ in range(n):
        floors.chain_ms(d, r, hops)


def monitored(c: Cluster, work: Any) -> Counter[tuple[str, str]]:
    """The workers' commands while ``work()`` runs."""
    port = c.redis_url.rsplit(":", 1)[1].split("/")[0]
    path = c.tmp / f"monitor-{time.monotonic_ns()}.txt"
    with path.open("wb") as out:
        mon = subprocess.Popen(["redis-cli", "-p", port, "monitor"], stdout=out)
        time.sleep(0.3)
        work()
        time.sleep(0.5)
        pids = socket_pids()
        mon.terminate()
        mon.wait()
    return parse_monitor(path, {p: pid for p, pid in pids.items()}, _worker_pids(c), script_names())


def per_unit(long: Counter[tuple[str, str]], short: Counter[tuple[str, str]], div: float) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for key in set(long) | set(short):
        v = (long[key] - short[key]) / div
        if abs(v) >= 0.05:
            out.setdefault(key[0], {})[key[1]] = round(v, 2)
    return dict(sorted(out.items(), key=lambda kv: -sum(kv[1].values())))


def commands(c: Cluster, d: Dispatcher) -> dict[str, Any]:
    r = c.redis()
    turn = per_unit(monitored(c, lambda: _runs(d, LONG, RUNS)), monitored(c, lambda: _runs(d, SHORT, RUNS)),
                    (LONG - SHORT) * RUNS)
    hops = per_unit(monitored(c, lambda: _chains(d, r, 2 * LONG, RUNS)),
                    monitored(c, lambda: _chains(d, r, 2 * SHORT, RUNS)), (LONG - SHORT) * RUNS)
    return {"per_turn": turn, "per_turn_total": round(sum(sum(v.values()) for v in turn.values()), 1),
            "per_2_hops": hops, "per_2_hops_total": round(sum(sum(v.values()) for v in hops.values()), 1)}


def _redis_cpu(r: redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def cpu(c: Cluster, d: Dispatcher, runs: int = 10) -> dict[str, Any]:
    """Worker and server CPU ms per turn and per 2 hops (no MONITOR)."""
    r = c.redis()

    def measured(work: Any) -> tuple[float, float, float]:
        w0, s0, t0 = c.cpu_s()["workers"], _redis_cpu(r), task_cpu(c)
        work()
        time.sleep(0.5)
        return c.cpu_s()["workers"] - w0, _redis_cpu(r) - s0, task_cpu(c) - t0

    div = (LONG - SHORT) * runs
    lw, ls, lt = measured(lambda: _runs(d, LONG, runs))
    sw, ss, st = measured(lambda: _runs(d, SHORT, runs))
    hlw, hls, hlt = measured(lambda: _chains(d, r, 2 * LONG, runs))
    hsw, hss, hst = measured(lambda: _chains(d, r, 2 * SHORT, runs))
    return {"worker_cpu_ms_per_turn": round((lw - sw) * 1000 / div, 2),
            "task_thread_cpu_ms_per_turn": round((lt - st) * 1000 / div, 3),
            "redis_cpu_ms_per_turn": round((ls - ss) * 1000 / div, 3),
            "worker_cpu_ms_per_2_hops": round((hlw - hsw) * 1000 / div, 2),
            "task_thread_cpu_ms_per_2_hops": round((hlt - hst) * 1000 / div, 3),
            "redis_cpu_ms_per_2_hops": round((hls - hss) * 1000 / div, 3)}


def task_cpu(c: Cluster) -> float:
    """CPU seconds the workers' task threads have used so far (``BENCH_TASK_CPU_DIR``)."""
    time.sleep(0.3)  # the workers write their totals every 0.2 s
    total = 0.0
    for path in (c.tmp / "taskcpu").glob("*.json"):
        try:
            total += sum(json.loads(path.read_text()).values())
        except (OSError, ValueError):
            pass
    return total


#: Owner of a profile sample: the first pattern (in this order) found anywhere on its stack
#: (py-spy frames read ``function (path:line)``, paths from the package root).
OWNERS: tuple[tuple[str, str], ...] = (
    ("celery/events/", "Celery: task events"),
    ("watchdog.py", "background: due watchdog"),
    ("sweeper.py", "background: sweeper"),
    ("_heartbeat (workers/recovery/lease.py", "background: lease heartbeat"),
    ("send_task (celery", "Celery: publish the next task"),
    ("shared/llm/openai.py", "reactq: LLM call (openai client, HTTP, parse)"),
    ("metrics.py", "reactq: metrics"),
    ("shared/flow/", "reactq: flow admission + settle"),
    ("workers/runs/flow.py", "reactq: flow admission + settle"),
    ("stores/spend.py", "reactq: flow admission + settle"),
    ("dump_state", "reactq: commit (state dump)"),
    ("commit (shared/stores/runs.py", "reactq: commit (script, round trip)"),
    ("after_llm", "reactq: read after the LLM call"),
    ("publish (shared/stores/runs.py", "reactq: live publish"),
    ("stores/calls.py", "reactq: tool open + close"),
    ("shared/tools/", "reactq: tool (hooks + run)"),
    ("workers/recovery/lease.py", "reactq: lease + load"),
    ("load_step", "reactq: lease + load"),
    ("record_of", "reactq: lease + load"),
    ("initial_state", "reactq: lease + load"),
    ("shared/engine/", "reactq: engine"),
    ("workers/", "reactq: other step code"),
    ("basic_ack", "Celery: ack"),
    ("acknowledge", "Celery: ack"),
    ("kombu/", "Celery: consume (kombu)"),
    ("celery/", "Celery: worker (dispatch, trace, pool)"),
)


def owner_of(stack: str) -> str:
    for pattern, owner in OWNERS:
        if pattern in stack:
            return owner
    return "other"


def classify(paths: list[Path]) -> dict[str, float]:
    """Share (%) of the samples in py-spy's raw files per owner."""
    samples: Counter[str] = Counter()
    for out in paths:
        for line in out.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            samples[owner_of(stack)] += int(n)
    total = sum(samples.values()) or 1
    return {k: round(100 * v / total, 1) for k, v in samples.most_common()}


def profile(c: Cluster, d: Dispatcher, seconds: float, work: Any) -> dict[str, float]:
    """Share of the workers' GIL-holding samples per owner while ``work()`` runs."""
    procs, outs = [], []
    for w in c.workers:
        out = c.tmp / f"pyspy-{w.proc.pid}-{time.monotonic_ns()}.txt"
        outs.append(out)
        procs.append(subprocess.Popen(
            [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(w.proc.pid), "--gil",
             "--nonblocking", "--rate", "400", "--format", "raw", "--duration", str(int(seconds)), "-o", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(1.0)
    work()
    for p in procs:
        p.wait()
    return classify(outs)


def _commandstats(r: redis.Redis) -> int:
    return sum(int(v["calls"]) for v in r.info("commandstats").values())


def r_figures(c: Cluster, d: Dispatcher, runs: int = RUNS) -> list[Figure]:
    """``R1`` Redis commands per turn (``INFO commandstats``, every client) and ``R2`` the
    server's CPU per turn (``INFO cpu``), each beside the floor's two hops, measured alike."""
    r = c.redis()

    def measured(work: Any) -> tuple[int, float]:
        n0, s0 = _commandstats(r), _redis_cpu(r)
        work()
        time.sleep(0.3)
        return _commandstats(r) - n0, _redis_cpu(r) - s0

    div = (LONG - SHORT) * runs
    (ln, ls), (sn, ss) = measured(lambda: _runs(d, LONG, runs)), measured(lambda: _runs(d, SHORT, runs))
    (hln, hls), (hsn, hss) = (measured(lambda: _chains(d, r, 2 * LONG, runs)),
                              measured(lambda: _chains(d, r, 2 * SHORT, runs)))
    how = {"runs": runs, "turns": [SHORT, LONG], "workers": c.spec.describe(),
           "measured": "(12-turn runs − 2-turn runs) / 10 per run; floor: (chain of 24 − chain of 4) / 10"}
    return [
        Figure("R1", "Redis commands per turn (INFO commandstats, every client), runs like P1's",
               round((ln - sn) / div, 1), "commands", floor=round((hln - hsn) / div, 1), target=40,
               rule="value<=", repeats=runs, details=how),
        Figure("R2", "Redis CPU per turn (INFO cpu of the server), runs like P1's",
               round((ls - ss) * 1000 / div, 3), "ms", floor=round((hls - hss) * 1000 / div, 3), target=1.0,
               rule="value<=", repeats=runs, details=how),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.budget")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--events", choices=("shipped", "on", "off"), default="shipped",
                    help="Celery task events on the workers (default: as reactq ships them)")
    ap.add_argument("--skip-commands", action="store_true")
    opts = ap.parse_args()
    env = {} if opts.events == "shipped" else {"BENCH_TASK_EVENTS": opts.events}
    out: dict[str, Any] = {"load_average": os.getloadavg(), "task_events": opts.events}
    with Cluster() as c:
        (c.tmp / "taskcpu").mkdir()
        env["BENCH_TASK_CPU_DIR"] = str(c.tmp / "taskcpu")
        c.start_workers(WorkerSpec(count=2, pool="threads", concurrency=4, env=env))
        d = Dispatcher(c.settings())
        _runs(d, 3, 3)  # warm up: imports, connections, the tool runner
        if not opts.skip_commands:
            out["commands"] = commands(c, d)
        out["cpu"] = cpu(c, d)
        if opts.profile:
            out["profile_p1"] = profile(c, d, 25, lambda: _runs(d, LONG, 15))
            sc = Scenario(turns=3)
            out["profile_p3"] = profile(c, d, 20, lambda: wait_all(c.redis(), submit_many(d, sc, 400), 120))
    out["load_average_end"] = os.getloadavg()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
