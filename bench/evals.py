"""``python -m bench.evals [N]``: an eval of N cases against the same N lines as a plain batch.

Both run (alternating, ``rounds`` times) on one 2-worker cluster (threads, concurrency 8) and the scripted LLM (each case: one
``echo`` turn, then the answer). The plain batch is driven by ``drive_stored_batch`` in this
process, as a gateway drives an HTTP batch; the eval by ``drive_eval`` (the same batch, each
line scored as it ends with exact, contains, tool_calls and max_turns). Reported: wall time of
each, the scoring's own time (summed over cases, and on the critical path after the batch's
last line), its Redis commands, and this process's CPU. Writes ``bench/results/evals-<N>.json``.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.cluster import Cluster, WorkerSpec
from bench.script import Scenario
from reactq.dispatcher.batch.items import parse_obj
from reactq.dispatcher.batch.store import BatchStore, drive_stored_batch
from reactq.dispatcher.client import Dispatcher
from reactq.dispatcher.evals import scorer as scoring
from reactq.dispatcher.evals.create import check, parse_objects, prepare, start_eval
from reactq.dispatcher.evals.drive import drive_eval
from reactq.shared.api.evals import EvalOptions
from reactq.shared.evals.cases import run_fields
from reactq.shared.stores.evals import EvalStore

EVALUATORS = ["exact", "contains", "tool_calls", "max_turns"]


def cases(n: int) -> list[dict[str, Any]]:
    return [{"id": f"c{i}", "query": Scenario(turns=2, calls=1, tool="echo", tag=f"c{i}").query(),
             "expected": "part000", "expected_tools": [{"name": "echo"}], "metadata": {"max_turns": 2}}
            for i in range(n)]


def commands(r: Any) -> int:
    return sum(int(v["calls"]) for k, v in r.info("commandstats").items())


def cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def plain_batch(d: Dispatcher, batches: BatchStore, raw: list[dict[str, Any]]) -> dict[str, Any]:
    from reactq.shared.evals.cases import EvalCase

    items = [parse_obj(run_fields(EvalCase.model_validate(c)), n, d.validate) for n, c in enumerate(raw, 1)]
    r, c0, cpu0, t0 = d.redis, commands(d.redis), cpu(), time.monotonic()
    batch_id = batches.create(items, 32)
    batches.claim(batch_id, "bench")
    drive_stored_batch(d, batches, batch_id, "bench", threading.Event())
    wall = time.monotonic() - t0
    return {"wall_s": round(wall, 2), "redis_commands": commands(r) - c0, "driver_cpu_s": round(cpu() - cpu0, 2)}


def evaluated(d: Dispatcher, batches: BatchStore, raw: list[dict[str, Any]]) -> dict[str, Any]:
    evals = EvalStore(d.redis, d.keys, 86400)
    spec = EvalOptions(evaluators=EVALUATORS, concurrency=32)
    spent: list[float] = []
    last_line: list[float] = []
    record = scoring.Scorer.record

    def timed(self: scoring.Scorer, res: dict[str, Any]) -> dict[str, Any]:
        t = time.perf_counter()
        try:
            return record(self, res)
        finally:
            spent.append(time.perf_counter() - t)

    scoring.Scorer.record = timed  # type: ignore[method-assign]
    r, c0, cpu0, t0 = d.redis, commands(d.redis), cpu(), time.monotonic()
    check(d, spec, evals, tenant="default", admin=True)
    prepared = prepare(d, parse_objects(raw), spec)
    eval_id, batch_id = start_eval(d, evals, batches, prepared, spec, tenant="default")
    batches.claim(batch_id, "bench")
    orig_add = batches.add_result

    def add(batch: str, res: dict[str, Any], running: int | None = None) -> None:
        orig_add(batch, res, running)
        last_line[:] = [time.monotonic()]

    batches.add_result = add  # type: ignore[method-assign]
    view = drive_eval(d, evals, batches, eval_id, "bench", threading.Event())
    ended = time.monotonic()
    wall = ended - t0
    scoring.Scorer.record = record  # type: ignore[method-assign]
    assert view is not None and view["counts"]["succeeded"] == len(raw), view["counts"]
    return {"wall_s": round(wall, 2), "redis_commands": commands(r) - c0, "driver_cpu_s": round(cpu() - cpu0, 2),
            "scoring_s_summed": round(sum(spent), 2), "scoring_ms_per_case": round(1000 * sum(spent) / len(spent), 2),
            "after_last_line_s": round(ended - last_line[0], 3),
            "pass_rate": view["pass_rate"], "scores": view["scores"]}


def main(n: int, rounds: int = 2) -> dict[str, Any]:
    raw = cases(n)
    with Cluster() as c:
        c.start_workers(WorkerSpec(count=2, pool="threads", concurrency=8))
        d = Dispatcher(c.settings())
        batches = BatchStore(d.redis, d.keys, 86400)
        plain_batch(d, batches, cases(50))  # warm the workers up
        # Alternated, so that a busy spell of the machine does not land on one side only.
        runs = [(plain_batch(d, batches, raw), evaluated(d, batches, raw)) for _ in range(rounds)]
    batch_s = sorted(b["wall_s"] for b, _ in runs)
    eval_s = sorted(e["wall_s"] for _, e in runs)
    out = {"cases": n, "workers": "2 × threads, concurrency 8; 32 runs in flight", "rounds": runs,
           "load_average_at_end": os.getloadavg()[0],
           "batch_wall_s_best": batch_s[0], "eval_wall_s_best": eval_s[0],
           "eval_over_batch_best": round(eval_s[0] / batch_s[0], 3),
           "scoring_ms_per_case": [e["scoring_ms_per_case"] for _, e in runs],
           "after_last_line_s": [e["after_last_line_s"] for _, e in runs],
           "extra_redis_commands_per_case": [round((e["redis_commands"] - b["redis_commands"]) / n, 1)
                                             for b, e in runs]}
    path = Path(__file__).parent / "results" / f"evals-{n}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000), indent=2))
