"""Driving an eval: its batch's lines run, each result is scored as it comes, and the eval
ends with its summary once the batch ended.

The batch is an ordinary stored batch (``dispatcher/batch/store.py``) with the eval's id in its
hash: whoever drives it (the gateway that took the eval, a gateway that resumed it after that
one died, or ``reactq eval`` in its own process) drives it through ``drive_eval``, which first
scores any result line a previous driver stored but did not score.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from reactq.dispatcher.batch.store import BatchStore, drive_stored_batch
from reactq.dispatcher.evals.scorer import Scorer
from reactq.shared.errors import ConfigError
from reactq.shared.evals.cases import EvalCase
from reactq.shared.evals.report import summarize
from reactq.shared.evals.scoring import BUILTINS, Evaluator, load_evaluators
from reactq.shared.stores.evals import EvalStore, record_field


def _missing(name: str) -> Evaluator:
    def fn(case: Any, result: Any) -> None:
        raise ConfigError(f"evaluator {name!r} is not loaded here (REACTQ_EVALUATORS)")
    return Evaluator(name, fn)


def evaluators_of(d: Any, names: list[str]) -> list[Evaluator]:
    """The eval's evaluators as this process has them (one not loaded here scores 0, saying so)."""
    known = {**BUILTINS, **load_evaluators(d.settings.evaluators)}
    return [known.get(n) or _missing(n) for n in names]


def cases_of(meta: dict[str, Any]) -> dict[str, tuple[int, EvalCase]]:
    out = {}
    for raw in meta["cases"]:
        body = {k: v for k, v in raw.items() if k != "line"}
        case = EvalCase.model_validate(body)
        out[case.key] = (int(raw["line"]), case)
    return out


def drive_eval(d: Any, evals: EvalStore, batches: BatchStore, eval_id: str, holder: str, stop: threading.Event,
               *, on_progress: Callable[[Scorer], None] | None = None) -> dict[str, Any] | None:
    """Run the eval's batch to its end, scoring each line; returns the eval's view once it
    ended (None when stopped first: the next driver resumes it)."""
    meta = evals.meta(eval_id)
    if meta is None:
        return None
    config = meta["config"]
    scorer = Scorer(d, evals, eval_id, cases_of(meta), evaluators_of(d, config["evaluators"]),
                    tenant=meta["tenant"], judge_model=config.get("judge_model"))
    batch_id = meta["batch_id"]
    before = batches.view(batch_id, with_results=True)
    try:
        if before is not None:
            done = evals.scored(eval_id)
            for res in before.get("results", []):
                if record_field({"status": res["status"], "line": res["line"], "case_id": str(res["id"])}) not in done:
                    scorer.submit(res)
            if before["status"] == "running":
                drive_stored_batch(d, batches, batch_id, holder, stop, on_line=scorer.submit,
                                   on_progress=(lambda _t: on_progress(scorer)) if on_progress else None)
    finally:
        scorer.close()
    after = batches.view(batch_id, with_results=False)
    if stop.is_set() or (after is not None and after["status"] == "running"):
        return None
    status = "cancelled" if after is not None and after["status"] == "cancelled" else "done"
    evals.finish(eval_id, status, summarize(evals.case_records(eval_id), config["evaluators"], total=meta["total"]))
    return evals.view(eval_id)
