"""The ``judge`` evaluator: an LLM of the registry grades an answer against ``expected``.

One structured call (``structured_llm_call``, degrading level by level) asks for ``{score: 0..1,
reason}``. The call's usage and dollars are returned apart from the case's run: the eval
reports them as ``judge_cost_usd`` and the caller adds them to the tenant's spend.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from reactq.shared.engine.structured import structured_llm_call
from reactq.shared.evals.cases import EvalCase
from reactq.shared.evals.scoring import CaseResult, Score
from reactq.shared.llm.base import LLM
from reactq.shared.llm.pricing import Price, call_cost
from reactq.shared.models import ChatMessage

__all__ = ["JUDGE_SCHEMA", "Judged", "judge", "judge_messages"]

JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1},
                   "reason": {"type": "string"}},
    "required": ["score", "reason"],
}

SYSTEM = ("You grade an AI assistant's answer against a reference answer. Score 1 when the answer "
          "says what the reference says (wording may differ), 0 when it contradicts or misses it, "
          "and in between for a partly right answer. Reply with the score and a one-sentence reason.")

#: Characters of each text the judge is shown.
MAX_CHARS = 20_000


@dataclass(frozen=True)
class Judged:
    """The judge's score of one case, and what grading it cost."""

    score: Score | None
    tokens: int = 0
    cost_usd: float = 0.0


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text[:MAX_CHARS]


def judge_messages(case: EvalCase, result: CaseResult) -> list[ChatMessage]:
    answer = result.output if result.output is not None else result.answer
    user = (f"Question:\n{_text(case.query)}\n\nReference answer:\n{_text(case.expected)}\n\n"
            f"Answer to grade:\n{_text(answer or '')}")
    return [ChatMessage(role="system", content=SYSTEM), ChatMessage(role="user", content=user)]


def _parse(data: dict[str, Any]) -> Score:
    value = data.get("score")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("score is not a number")
    return Score(min(1.0, max(0.0, float(value))), str(data.get("reason") or "")[:500] or None)


async def judge(llm: LLM, case: EvalCase, result: CaseResult, price: Price | None) -> Judged:
    """Grade one case (None score when the case has no ``expected``). Raises what the LLM
    call raises; the caller scores that 0 with the error as reason."""
    if case.expected is None:
        return Judged(None)
    got = await structured_llm_call(llm, judge_messages(case, result), JUDGE_SCHEMA, "grade",
                                    parse_fn=_parse, temperature=0.0, max_tokens=400)
    usage = got.total_usage
    cost = usage.cost_usd
    if not cost and price is not None:
        cost = call_cost(usage.model_dump(), price)
    return Judged(got.value, tokens=usage.total_tokens, cost_usd=cost)
