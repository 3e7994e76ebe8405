"""The planner: a goal (and what earlier rounds found) → a validated ``ExecutionPlan``.

One ``structured_llm_call`` with function ``create_plan`` and no default: a model that
cannot produce a plan raises ``StructuredOutputError`` ("… extraction levels failed …"),
a cyclic plan raises ``CycleError``; both are ``ValueError`` s. The 2–6 step guidance is
only guidance; a plan above ``max_steps`` is cut with a warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from reactq.shared.engine.structured import structured_llm_call
from reactq.shared.llm.base import LLM
from reactq.shared.models import ChatMessage, Usage

from . import prompts as P
from .models import ExecutionPlan, ParsedPlan, dedupe_ids, parse_plan_data, validate_steps

__all__ = ["PlanOutcome", "create_plan", "planner_messages"]


@dataclass
class PlanOutcome:
    plan: ExecutionPlan
    usage: Usage
    llm_calls: int


def planner_messages(goal: str, *, tools: Sequence[tuple[str, str]] = (),
                     context: str | None = None, desc_length: int = 120,
                     now: datetime | None = None) -> list[ChatMessage]:
    """The system rules and ``Goal: …`` + tools + ``Additional context``."""
    user = f"Goal: {goal}"
    if tools:
        lines = "\n".join(f"- {name}: {_cut(desc, desc_length)}" for name, desc in tools)
        user += f"\n\nAvailable tools:\n{lines}"
    if context:
        user += f"\n\nAdditional context:\n{context}"
    return [ChatMessage(role="system", content=P.planner_system(now or datetime.now())),
            ChatMessage(role="user", content=user)]


async def create_plan(llm: LLM, goal: str, *, tools: Sequence[tuple[str, str]] = (),
                      context: str | None = None, desc_length: int = 120,
                      max_steps: int = 50, now: datetime | None = None) -> PlanOutcome:
    """Ask ``llm`` for a plan for ``goal``; returns it validated, with the call's usage."""
    messages = planner_messages(goal, tools=tools, context=context, desc_length=desc_length,
                                now=now)
    result = await structured_llm_call(llm, messages, P.PLAN_SCHEMA, P.PLAN_FUNCTION,
                                       parse_fn=parse_plan_data)
    parsed: ParsedPlan = result.value
    steps, warnings = dedupe_ids(parsed.steps)
    warnings = parsed.warnings + warnings
    if len(steps) > max_steps:
        warnings.append(f"The plan had {len(steps)} steps; only the first {max_steps} are kept")
        steps = steps[:max_steps]
    steps, pruned = validate_steps(steps)
    return PlanOutcome(ExecutionPlan(goal=goal, steps=steps, warnings=warnings + pruned),
                       result.total_usage, result.llm_calls)


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
