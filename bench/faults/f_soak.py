"""Soak: many runs of several tool turns while workers are killed with -9 all along.

Four worker processes (threads pool × 4) on the Redis broker; runs of 4 turns (3 tool
turns of 2 ``tally`` calls, then the answer, each LLM reply 0.3 s late) are submitted with
at most ``INFLIGHT`` in flight. Every 0.5–1.5 s a worker that has been ready for 1 s or
more (its watchdog runs) is killed with -9 and a new one started in its place, as long as
another ready worker remains (else the kill waits), until both
``RUNS`` runs were submitted and ``KILLS`` kills done;
then the workers are left alone and every run must end. Default settings: lease 3 s,
grace 2 s.

Figures: ``runs``, ``kills``, ``resends`` (by the watchdogs; ``resend_late_*_s``: how
long after its deadline each was sent — the watchdog's own delay, from the workers' logs), ``stalled`` (not terminal at the end: must be 0),
``succeeded`` / ``failed`` (``crash_limited``: ended by the crash limit), ``slowest_resume_s``
(the longest gap between two consecutive events of one run: a kill shows as a gap of
about the lease + grace; ``resume_gaps`` counts gaps > 1.5 s), ``duplicate_seqs`` (must be 0),
``tool_reruns`` (``tally`` executions beyond one per call: an idempotent tool whose worker
died mid-call may run again) and the wall time.
"""

from __future__ import annotations

import json
from itertools import pairwise
import random
import time
import uuid
from collections import Counter
from typing import Any

import redis

from bench.cluster import Cluster, Worker, WorkerSpec
from bench.script import Scenario

RUNS = 200
KILLS = 50
INFLIGHT = 24
TERMINAL = {b"succeeded", b"failed", b"cancelled"}
#: Once kills stop, every run must end within this long (it is far beyond the bound).
DRAIN_S = 180.0


def run(runs: int = RUNS, kills: int = KILLS, seed: int = 18) -> dict[str, Any]:
    rnd = random.Random(seed)
    with Cluster() as c:
        print(f"soak: logs in {c.tmp}", flush=True)
        c.start_workers(WorkerSpec(count=4, pool="threads", concurrency=4))
        for w in c.workers:  # started by the bench app: ready since start_workers returned
            c.redis().set(f"bench:soak:ready:{w.name}", time.time() - 10)
        from reactq.dispatcher.client import Dispatcher

        d = Dispatcher(c.settings())
        r = c.redis()
        tag = uuid.uuid4().hex[:6]
        scenarios = [Scenario(turns=4, calls=2, tool="tally", delay=0.3, tag=f"{tag}.{i}")
                     for i in range(runs)]
        started = time.monotonic()
        ids, killed = _submit_under_kills(c, d, r, scenarios, kills, rnd)
        end_kills = time.monotonic()
        left = _drain(r, d, ids, DRAIN_S)
        wall = time.monotonic() - started
        figures = _figures(r, d, ids, tag, runs)
        figures.update(_watchdog_figures(c))
        figures.update(runs=len(ids), kills=killed, stalled=len(left),
                       stalled_ids=left[:5], wall_s=round(wall, 1),
                       drain_s=round(time.monotonic() - end_kills, 1),
                       bound_s=d.settings.due_seconds)
        return figures


def _submit_under_kills(c: Cluster, d: Any, r: redis.Redis, scenarios: list[Scenario],
                        kills: int, rnd: random.Random) -> tuple[list[str], int]:
    from reactq.shared.requests import RunRequest

    todo = list(scenarios)
    ids: list[str] = []
    inflight: set[str] = set()
    killed = 0
    next_kill = time.monotonic() + 1.0
    while todo or killed < kills:
        if inflight:
            statuses = r.pipeline(transaction=False)
            order = list(inflight)
            for rid in order:
                statuses.hget(d.keys.run(rid), "status")
            for rid, st in zip(order, statuses.execute(), strict=True):
                if st in TERMINAL:
                    inflight.discard(rid)
        while todo and len(inflight) < INFLIGHT:
            sc = todo.pop()
            h = d.submit(RunRequest(query=sc.query(), completion_check=False))
            ids.append(h.run_id)
            inflight.add(h.run_id)
        if time.monotonic() >= next_kill and killed < kills:
            marks = r.mget([f"bench:soak:ready:{w.name}" for w in c.workers])
            grown = [w for w, m in zip(c.workers, marks, strict=True) if m and time.time() - float(m) >= 1.0]
            # Never the last ready worker: on a loaded machine a new worker takes seconds to
            # start, and a fleet with no worker up measures restarts, not recovery.
            if len(grown) >= 2:
                _kill_and_replace(c, rnd.choice(grown))
                killed += 1
                next_kill = time.monotonic() + rnd.uniform(0.5, 1.5)
        time.sleep(0.05)
    return ids, killed


def _kill_and_replace(c: Cluster, victim: Worker) -> None:
    """kill -9 one worker (process group) and start another in its place (not waited for)."""
    import os
    import signal
    import subprocess
    import sys

    from bench.cluster import QUEUES, ROOT

    if victim.proc.poll() is None:
        os.killpg(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait()
    c.workers.remove(victim)
    name = f"soak-{uuid.uuid4().hex[:6]}"
    log = c.tmp / f"{name}.log"
    cmd = [sys.executable, "-m", "celery", "-A", "bench.faults.soakapp", "worker", "-Q", QUEUES,
           "--pool", "threads", "-c", "4", "-n", f"{name}@%h", "--without-mingle",
           "--without-gossip", "-l", "WARNING"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=c.worker_env({}), stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    c.workers.append(Worker(name, proc, log))


def _drain(r: redis.Redis, d: Any, ids: list[str], timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    left = list(ids)
    while left and time.monotonic() < deadline:
        pipe = r.pipeline(transaction=False)
        for rid in left:
            pipe.hget(d.keys.run(rid), "status")
        left = [rid for rid, st in zip(left, pipe.execute(), strict=True) if st not in TERMINAL]
        if left:
            time.sleep(0.25)
    return left


def _figures(r: redis.Redis, d: Any, ids: list[str], tag: str, runs: int) -> dict[str, Any]:
    statuses: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    crash_limited = dup_seqs = resume_gaps = 0
    slowest = 0.0
    where: dict[str, Any] = {}
    for rid in ids:
        st = r.hget(d.keys.run(rid), "status")
        statuses[st.decode() if st else "missing"] += 1
        if st == b"failed":
            res = json.loads(r.hget(d.keys.run(rid), "result") or b"{}")
            errors[str(res.get("error"))[:160]] += 1
        entries = r.xrange(d.keys.run_events(rid))
        seqs = [json.loads(f[b"data"])["seq"] for _, f in entries]
        dup_seqs += len(seqs) - len(set(seqs))
        kinds = [json.loads(f[b"data"]).get("kind") for _, f in entries if f[b"event"] == b"error"]
        crash_limited += int("task_crashed" in kinds or "tool_crashed" in kinds)
        stamps = [int(i.split(b"-")[0]) / 1000 for i, _ in entries]
        for k, (a, b) in enumerate(pairwise(stamps)):
            gap = b - a
            resume_gaps += int(gap > 1.5)
            if gap > slowest:
                slowest = gap
                where = {"run": rid, "after": _describe(entries[k][1]),
                         "before": _describe(entries[k + 1][1]), "at": a}
    tallies = [int(v) for k in r.scan_iter(match=f"bench:tally:{tag}.*", count=1000)
               if (v := r.get(k)) is not None]
    return {"succeeded": statuses.get("succeeded", 0), "failed": statuses.get("failed", 0),
            "crash_limited": crash_limited, "failures": dict(errors.most_common(3)), "slowest_resume_s": round(slowest, 2),
            "resume_gaps": resume_gaps, "duplicate_seqs": dup_seqs, "slowest_where": where,
            "tool_calls": runs * 3 * 2, "tool_calls_run": len(tallies),
            "tool_reruns": sum(t - 1 for t in tallies),
            "due_left": r.zcard(d.keys.due)}


def _watchdog_figures(c: Cluster) -> dict[str, Any]:
    """From the workers' logs: how many resends, how late each was past its deadline (a
    deadline is the commit + bound, or the moment a dead holder's lease could lapse)."""
    import re

    late = []
    for path in c.tmp.glob("*.log"):
        for m in re.finditer(r"due: \S+( \(its holder died\))?, ([0-9.]+) s past", path.read_text(errors="replace")):
            late.append((float(m.group(2)), bool(m.group(1))))
    lat = sorted(x for x, _ in late)
    return {"resends": len(lat), "resends_after_holder_died": sum(1 for _, d in late if d),
            "resend_late_p50_s": round(lat[len(lat) // 2], 2) if lat else None,
            "resend_late_max_s": round(lat[-1], 2) if lat else None}


def _describe(fields: dict[bytes, bytes]) -> str:
    data = json.loads(fields[b"data"])
    parts = [fields[b"event"].decode(), str(data.get("type") or data.get("kind") or ""),
             str(data.get("status") or "")]
    return "/".join(p for p in parts if p)


if __name__ == "__main__":
    print(json.dumps(run()))
