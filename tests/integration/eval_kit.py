"""Custom evaluators the eval tests load (REACTQ_EVALUATORS=tests.integration.eval_kit:EVALUATORS)."""

from __future__ import annotations

import reactq


@reactq.evaluator("short_answer")
def short_answer(case: object, result: object) -> reactq.Score:
    answer = getattr(result, "answer", "") or ""
    return reactq.Score(1.0 if len(answer) <= 10 else 0.0, f"{len(answer)} characters")


@reactq.evaluator("explodes")
def explodes(case: object, result: object) -> bool:
    raise RuntimeError("this evaluator is broken")


EVALUATORS = [short_answer, explodes]
