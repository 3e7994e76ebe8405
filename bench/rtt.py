"""Redis round trips per run and per turn, counted in the workers (``bench/rtt_probe.py``).

    python -m bench.rtt [--runs N] [--raw]     # one JSON object

Real workers (2 processes, threads pool × 4) and the scripted LLM, as for P1: runs of 3 turns
(LLM → ``echo``, LLM → ``echo``, LLM → answer) and of 1 turn (LLM → answer), one at a time,
``completion_check`` off. Each figure is round trips per run, by task (``iterate``, ``tool``,
``answer``) and by source (``CATEGORIES``); ``per_turn`` is (3-turn − 1-turn) / 2: what one
more tool turn costs. Celery's own traffic (publishing the next task, acks, task events:
``broker``) is reported apart, and so is background work outside tasks (the watchdog, the
lease heartbeat, the consumer loop), per second of an idle window. Counting is exact: a
loaded machine does not blur it.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from bench.cluster import Cluster, WorkerSpec
from bench.script import Scenario

#: (label prefix, source); the first match wins. Labels are ``<file>:<function>``.
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("broker", "broker"),
    ("health-check", "health-check"),
    ("workers/recovery/lease.py:_try", "lease + load"),  # the lease taken with the task's first read
    ("workers/recovery/lease.py:value", "load"),  # that read alone (a cluster, a lease taken late)
    ("workers/recovery/lease.py", "lease"),
    ("workers/metrics.py", "metrics"),
    ("shared/flow/", "flow"),
    ("shared/stores/flow.py", "flow"),
    ("workers/runs/flow.py", "flow"),
    ("workers/runs/cancelwatch.py", "cancel"),
    ("shared/stores/runs.py:publish", "publish"),
    ("shared/stores/runs.py:commit", "commit"),
    ("shared/stores/runs.py:_write_due", "commit"),
    ("shared/stores/runs.py:_index_status", "commit"),
    ("shared/stores/runs.py:load", "load"),
    ("shared/stores/runs.py:cancel_requested", "cancel"),
    ("shared/stores/runs.py:interrupts_after", "interrupts"),
    ("shared/stores/streams.py:entries_after", "interrupts"),
    ("shared/stores/runs.py:ledger", "ledger"),
    ("shared/stores/runs.py:fanin", "fan-in"),
    ("shared/stores/runs.py:get_turn", "turn"),
    ("shared/stores/runs.py:after_llm", "after-LLM read"),
    ("shared/stores/calls.py:close", "tool close"),
    ("shared/stores/calls.py", "tool open"),
    ("shared/stores/threads.py", "threads"),
    ("workers/runs/threads.py", "threads"),
)


def category(label: str) -> str:
    for prefix, name in CATEGORIES:
        if label.startswith(prefix):
            return name
    return label


def _snapshot(out: Path) -> Counter[str]:
    total: Counter[str] = Counter()
    for f in out.glob("*.json"):
        for _ in range(3):
            try:
                total.update(json.loads(f.read_text()))
                break
            except (OSError, ValueError):
                time.sleep(0.05)
    return total


def _settled(out: Path) -> Counter[str]:
    """The counts once the workers' files stopped moving (their dumps run every 0.2 s)."""
    last = _snapshot(out)
    while True:
        time.sleep(0.5)
        now = _snapshot(out)
        if _tasks_only(now) == _tasks_only(last):
            return now
        last = now


def _tasks_only(c: Counter[str]) -> Counter[str]:
    return Counter({k: v for k, v in c.items() if not k.startswith("-|")})


def _runs(c: Cluster, out: Path, turns: int, runs: int) -> Counter[str]:
    from reactq.dispatcher.client import Dispatcher
    from reactq.shared.requests import RunRequest

    d = Dispatcher(c.settings())
    before = _settled(out)
    for _ in range(runs):
        h = d.submit(RunRequest(query=Scenario(turns=turns, calls=1, tool="echo").query(),
                                completion_check=False))
        h.result(timeout=120)
    after = _settled(out)
    return _tasks_only(after - before)


def _by_task(counts: Counter[str], runs: int, *, raw: bool) -> dict[str, dict[str, float]]:
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for key, n in counts.items():
        task, label = key.split("|", 1)
        out[task.removeprefix("reactq.")][label if raw else category(label)] += n
    return {t: {k: round(v / runs, 2) for k, v in sorted(c.items())} for t, c in sorted(out.items())}


def _without_broker(by_task: dict[str, dict[str, float]]) -> float:
    """reactq's own round trips: not Celery's, nor redis-py's idle-connection PINGs."""
    return round(sum(v for c in by_task.values() for k, v in c.items()
                     if k not in ("broker", "health-check")), 2)


def _minus(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]], div: float) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for task in sorted(set(a) | set(b)):
        ka, kb = a.get(task, {}), b.get(task, {})
        diff = {k: round((ka.get(k, 0) - kb.get(k, 0)) / div, 2) for k in sorted(set(ka) | set(kb))}
        diff = {k: v for k, v in diff.items() if v}
        if diff:
            out[task] = diff
    return out


def run(runs: int = 5, raw: bool = False) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="reactq-rtt-"))
    with Cluster() as c:
        c.start_workers(WorkerSpec(count=2, pool="threads", concurrency=4,
                                   env={"BENCH_RTT_DIR": str(out)}))
        # One warm-up run: connections, script loads and catalogs are not per-run costs.
        _runs(c, out, 3, 1)
        idle0, t0 = _settled(out), time.monotonic()
        time.sleep(3)
        idle1 = _snapshot(out)
        idle_s = time.monotonic() - t0
        three = _by_task(_runs(c, out, 3, runs), runs, raw=raw)
        one = _by_task(_runs(c, out, 1, runs), runs, raw=raw)
    background = {k.removeprefix("-|"): round(v / idle_s, 2) for k, v in sorted((idle1 - idle0).items())
                  if k.startswith("-|")}
    per_turn = _minus(three, one, 2)
    return {"runs": runs,
            "per_3_turn_run": three, "per_3_turn_run_total": _without_broker(three),
            "per_1_turn_run": one, "per_1_turn_run_total": _without_broker(one),
            "per_turn": per_turn, "per_turn_total": _without_broker(per_turn),
            "background_per_s": background}


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.rtt", description=__doc__)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--raw", action="store_true", help="by <file>:<function> instead of by source")
    args = p.parse_args()
    print(json.dumps(run(args.runs, args.raw), indent=1))


if __name__ == "__main__":
    main()
