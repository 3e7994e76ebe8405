"""``python -m bench [--quick] [P1 P1b P2 P3 P4 P5 P6 ...]``: run the benchmarks.

Prints one JSON object per figure as it is measured, then a table; writes
``bench/results/latest.json`` and a dated copy. See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench import budget, experiments, figures, fork, inproc, recovery, rtt2
from bench.cluster import Cluster, WorkerSpec
from bench.report import Figure, Report
from bench.runs import throughput
from bench.script import Scenario
from reactq.dispatcher.client import Dispatcher

ALL = ("P1b", "P1", "R", "P2", "P5", "P3", "P4", "P6", "P0", "P11", "P1-rtt2")
TASKS_PER_3_TURN_RUN = 6  # iterate ×3 (turns 1, 2, 3), tool ×2, answer ×1


@dataclass
class Plan:
    """Sizes and repeats: the full run fits `make bench` in < 15 minutes on 2 cores."""

    repeats: int = 5
    p1b_repeats: int = 9
    p3_sizes: tuple[int, ...] = (100, 1000, 5000)
    p3_floor_tasks: int = 1000
    budget_s: float = 720.0  # everything, from start to table (make bench: < 15 min with install)
    p4_runs: int = 1000
    p4_spec: WorkerSpec = field(default_factory=lambda: WorkerSpec(count=2, pool="threads", concurrency=50))
    p4_compare_runs: int = 64
    p4_compare: bool = True
    p5_runs: int = 20
    p5_floor: int = 500
    p6_runs: int = 150
    p6_ttl: int = 30
    p0_samples: int = 5
    p11_lines: int = 1000

    @classmethod
    def quick(cls) -> Plan:
        return cls(repeats=2, p1b_repeats=3, p3_sizes=(30,), p3_floor_tasks=300, budget_s=300,
                   p4_runs=60, p4_spec=WorkerSpec(count=2, pool="threads", concurrency=20),
                   p4_compare=False, p5_runs=3, p5_floor=100, p6_runs=30, p6_ttl=10, p0_samples=2,
                   p11_lines=50)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("figures", nargs="*", help=f"figures to run (default: all of {' '.join(ALL)})")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke pass in ~1-2 minutes")
    parser.add_argument("--profile", action="store_true", help="add a cProfile summary to P1b")
    parser.add_argument("--experiment", action="append", default=[], choices=experiments.NAMES,
                        help="apply a patch in the workers and here (see bench/experiments.py)")
    args = parser.parse_args(argv)
    # Stop cleanly on SIGTERM too: leaving the `with Cluster()` block stops every process.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    wanted = [f.upper().replace("P1B", "P1b").replace("R1", "R").replace("R2", "R").replace("RTT2", "rtt2")
              for f in args.figures] or list(ALL)
    unknown = [f for f in wanted if f not in ALL]
    if unknown:
        parser.error(f"unknown figure(s) {unknown}; choose from {' '.join(ALL)}")
    plan = Plan.quick() if args.quick else Plan()
    report = Report(sys.argv[1:] if argv is None else argv)
    extra: dict[str, Any] = {"quick": args.quick, "experiments": args.experiment,
                             "figures_selected": wanted}
    if args.experiment:
        os.environ["BENCH_EXPERIMENTS"] = ",".join(args.experiment)  # the workers inherit it
        experiments.apply(args.experiment)
    full = not args.quick and not args.experiment and wanted == list(ALL)
    stem = "latest" if full else "-".join((["quick"] if args.quick else []) +
                                          ([] if wanted == list(ALL) else wanted) + args.experiment)
    failed = False
    with Cluster() as cl:
        extra["redis_binary"] = cl.redis_binary
        extra["redis_version"] = cl.redis().info("server").get("redis_version")
        try:
            failed = _run(cl, wanted, plan, report, args.profile, extra) > 0
        except Exception:  # report what was measured, then fail
            traceback.print_exc()
            failed = True
    print()
    print(report.table())
    path = report.write(extra, stem)
    print(f"\nresults: {path}")
    return 1 if failed else 0


MAIN_SET = WorkerSpec(count=2, pool="threads", concurrency=8, env={"BENCH_PUBTIMES": "1"})


class Runner:
    """Runs the figures in order; a figure that fails is reported as failed and the
    workers are reset, so that one failure does not lose the others."""

    def __init__(self, cl: Cluster, plan: Plan, report: Report, wanted: list[str]) -> None:
        self.cl, self.plan, self.report, self.wanted = cl, plan, report, wanted
        self.d = Dispatcher(cl.settings())
        self.deadline = time.monotonic() + plan.budget_s
        self.failures = 0

    def attempt(self, fig_id: str, fn: Callable[[], Any], restart: WorkerSpec | None = None) -> Any:
        try:
            return fn()
        except Exception as exc:
            traceback.print_exc()
            self.failures += 1
            self.report.add(Figure(fig_id, "failed", None, "", status="failed",
                                   details={"error": f"{type(exc).__name__}: {exc}"[:500]}))
            self.cl.reset()
            if restart is not None:
                self.cl.start_workers(restart)
            return None


def _run(cl: Cluster, wanted: list[str], plan: Plan, report: Report, profile: bool,
         extra: dict[str, Any]) -> int:
    run = Runner(cl, plan, report, wanted)
    d = run.d
    llm: dict[str, float] = {}
    if "P1b" in wanted:
        run.attempt("P1b", lambda: report.add(inproc.p1b(plan.p1b_repeats, profile=profile)))
        run.attempt("P1b-flat", lambda: report.add(inproc.p1b_flat(2 * plan.p1b_repeats)))
    if "P1" in wanted:
        llm = inproc.llm_call_ms(cl.llm_url)
        extra["llm_call"] = llm
    rate = 0.0  # P3's throughput (runs/s), which bounds P4
    if {"P1", "R", "P2", "P5", "P3"} & set(wanted):
        cl.start_workers(MAIN_SET)
        throughput(d, cl.redis(), Scenario(turns=2), 20, timeout=120)  # warm-up
        rss = [_rss_point(cl, d)]
        if "P1" in wanted:
            run.attempt("P1", lambda: report.add(figures.p1(cl, d, plan.repeats, llm)), MAIN_SET)
        if "R" in wanted:
            run.attempt("R1", lambda: [report.add(f) for f in budget.r_figures(cl, d)], MAIN_SET)
        if "P2" in wanted:
            run.attempt("P2", lambda: report.add(figures.p2(cl, d, plan.repeats)), MAIN_SET)
        if "P5" in wanted:
            run.attempt("P5", lambda: [report.add(f) for f in figures.p5(cl, d, plan.p5_runs, plan.p5_floor)],
                        MAIN_SET)
        if "P3" in wanted:
            rate = run.attempt("P3", lambda: _p3(run, rss), MAIN_SET) or 0.0
        rss.append(_rss_point(cl, d))
        if "P6" in wanted:
            report.add(figures.p6_rss(rss))
        cl.flush()
    if "P4" in wanted:
        run.attempt("P4", lambda: _p4(run, rate))
        if plan.p4_compare:
            n = plan.p4_compare_runs
            for pool in ("threads", "prefork"):
                spec = WorkerSpec(count=2, pool=pool, concurrency=8)
                run.attempt(f"P4-{pool}-c16",
                            lambda spec=spec, pool=pool: report.add(
                                figures.p4(cl, d, spec, n, 1.0, f"P4-{pool}-c16", p3_rate=rate)))
                cl.flush()
    _last(run, wanted)
    return run.failures


def _last(run: Runner, wanted: list[str]) -> None:
    """P6's memory, P0's kills, P11's forks, then P1-rtt2 on a cluster of its own."""
    cl, d, plan, report = run.cl, run.d, run.plan, run.report
    if "P6" in wanted:
        run.attempt("P6", lambda: [report.add(f) for f in figures.p6_memory(cl, d, plan.p6_runs, plan.p6_ttl)])
    if "P0" in wanted:
        run.attempt("P0", lambda: [report.add(f) for f in recovery.p0(cl, plan.p0_samples)])
    if "P11" in wanted:
        cl.start_workers(fork.SPEC)
        run.attempt("P11", lambda: [report.add(f) for f in fork.p11(cl, d, plan.p11_lines)])
        cl.flush()
    cl.stop_workers()
    if "P1-rtt2" in wanted:
        run.attempt("P1-rtt2", lambda: report.add(_p1_rtt2(plan)))


def _p1_rtt2(plan: Plan) -> Figure:
    """P1 and its floor on workers whose Redis is 2 ms of round trip away (``bench.rtt2``)."""
    with rtt2.DelayedCluster() as dcl:
        dcl.start_workers(MAIN_SET)
        d = Dispatcher(dcl.settings())
        throughput(d, dcl.redis(), Scenario(turns=2), 10, timeout=120)  # warm-up
        llm = inproc.llm_call_ms(dcl.llm_url)
        return rtt2.p1_rtt2(figures.p1(dcl, d, plan.repeats, llm), dcl)


def _p4(run: Runner, rate: float) -> None:
    """P4 with ``plan.p4_runs`` runs, or fewer when they would not fit in the time left."""
    plan, wanted = run.plan, run.wanted
    runs, note = plan.p4_runs, ""
    left = run.deadline - time.monotonic() - (_reserve(plan, ["P6"], rate) if "P6" in wanted else 0)
    if rate and plan.p4_compare:
        left -= 2 * (1.1 * max(plan.p4_compare_runs * 3 / 16, plan.p4_compare_runs / rate) + 20)
    if rate and runs / rate * 1.1 + 30 > left:
        runs = max(200, int((left - 30) / 1.1 * rate / 100) * 100)
        note = (f"{plan.p4_runs:,} runs would take ≈ {plan.p4_runs / rate:.0f} s at P3's "
                f"{rate:.1f} runs/s; {max(left, 0):.0f} s were left in the budget")
    fig = figures.p4(run.cl, run.d, plan.p4_spec, runs, 1.0, "P4", p3_rate=rate)
    if note:
        fig.details.update(instead_of=plan.p4_runs, why=note)
    run.report.add(fig)
    run.cl.flush()


def _rss_point(cl: Cluster, d: Dispatcher) -> tuple[int, float]:
    """(runs the current workers finished, their RSS in MB)."""
    return figures.task_totals(d).get("reactq.answer", 0), sum(cl.worker_rss()) / 2**20


def _reserve(plan: Plan, wanted: list[str], rate: float) -> float:
    """Seconds to keep for P4 and P6 after P3 (worker restarts, warm-ups, TTL waits), at
    P3's throughput ``rate`` (runs/s), which bounds P4 when the CPU is the limit."""
    def makespan(runs: int, slots: int) -> float:
        return max(runs * 3 / slots, runs / rate if rate else 0.0)

    out = 0.0
    if "P4" in wanted:
        out += 1.1 * makespan(plan.p4_runs, plan.p4_spec.slots) + 30
        out += (2 * (1.1 * makespan(plan.p4_compare_runs, 16) + 20)) if plan.p4_compare else 0
    if "P6" in wanted:
        out += plan.p6_runs / (rate or 5.0) + plan.p6_ttl + 30
    return out


def _p3(run: Runner, rss: list[tuple[int, float]]) -> float:
    """P3 at each size that fits in the time left; a size that does not fit is measured at
    the largest multiple of 500 that does (≥ 1,000), and the figure says so."""
    cl, d, plan, report, deadline, wanted = run.cl, run.d, run.plan, run.report, run.deadline, run.wanted
    floor = figures.p3_floor(cl, d, plan.p3_floor_tasks, repeats=2)
    rate = 0.0
    for n in plan.p3_sizes:
        left = deadline - time.monotonic() - _reserve(plan, wanted, rate)
        size, note = n, ""
        if rate and n / rate > left:
            size = int(left * rate * 0.9 / 500) * 500
            note = (f"{n:,} runs would take ≈ {n / rate:.0f} s at {rate:.1f} runs/s; "
                    f"{left:.0f} s were left in the {plan.budget_s:.0f} s budget")
            if size < 1000 or size >= n:
                report.add(Figure(f"P3@{n}", f"throughput of {n:,} 3-turn runs", None, "runs/s",
                                  target=0.5, rule="ratio>=", status="skipped", details={"why": note}))
                continue
        repeats = 3 if size <= 100 else 1
        fig = figures.p3(cl, d, size, repeats, floor, TASKS_PER_3_TURN_RUN,
                         timeout=max(120.0, deadline - time.monotonic()))
        if note:
            fig.details["instead_of"] = n
            fig.details["why"] = note
        report.add(fig)
        if size >= 1000 or not rate:
            rate = fig.value or rate
        cl.flush()
        rss.append(_rss_point(cl, d))
    return rate


if __name__ == "__main__":
    sys.exit(main())
