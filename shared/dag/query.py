"""Texts built from results: a step's query, the re-plan context, the synthesis
prompt and the not-achieved answer."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from reactq.shared.engine.output import output_prompt
from reactq.shared.models import ChatMessage

from . import prompts as P
from .models import AnalysisResult
from .state import RoundRecord, StepState

__all__ = ["build_step_query", "dependency_context", "fallback_answer", "replan_context",
           "synthesis_messages", "MAX_QUERY_CHARS"]

#: ``RunRequest.query``'s limit: a step query must still be a valid run request.
MAX_QUERY_CHARS = 100_000

_STRUCTURED = re.compile(r"\|\s*-{3}|```|\bSection \d|\bArticle \d|제\s*\d+\s*조|第\s*\d+\s*条")


def dependency_context(step: StepState, steps: Sequence[StepState]) -> str:
    """``[<id>] (<status>) <task>\\nResult: <summary>`` per dependency (unknown ids skipped)."""
    by_id = {s.id: s for s in steps}
    blocks = [f"[{d.id}] ({d.status}) {d.task}\nResult: {d.result or '(no result)'}"
              for d in (by_id.get(i) for i in step.dependencies) if d is not None]
    return "\n\n".join(blocks)


def build_step_query(goal: str | None, step: StepState, steps: Sequence[StepState], *,
                     max_context_chars: int = 50_000, multiplier: float = 3.0) -> str:
    """The child run's query: goal, task, suggested tool and its dependencies' results.

    The context budget is ``max_context_chars`` (×``multiplier`` when a dependency result
    holds structured content such as a table or code), and never more than what keeps the
    whole query within ``RunRequest``'s limit.
    """
    parts = [f"Original goal: {goal}"] if goal else []
    parts.append(f"Task: {step.task}")
    if step.tool_hint:
        parts.append(f"Suggested tool: {step.tool_hint}")
    context = dependency_context(step, steps)
    if context:
        budget = max_context_chars
        if any(_STRUCTURED.search(s.result or "") for s in steps if s.id in step.dependencies):
            budget = int(budget * multiplier)
        head = "\n\n".join(parts) + "\n\n" + P.DEPENDENCY_CONTEXT_HEADER + "\n"
        budget = min(budget, MAX_QUERY_CHARS - len(head) - len(P.CONTEXT_TRUNCATED))
        if len(context) > budget:
            context = context[:max(0, budget)] + P.CONTEXT_TRUNCATED
        parts.append(f"{P.DEPENDENCY_CONTEXT_HEADER}\n{context}")
    return "\n\n".join(parts)[:MAX_QUERY_CHARS]


def replan_context(history: Sequence[RoundRecord], *, recent: int = 500, older: int = 200) -> str:
    """Every earlier round's verdict and step results (the latest round less cut)."""
    lines: list[str] = []
    for n, record in enumerate(history):
        limit = recent if n == len(history) - 1 else older
        analysis = record.analysis or AnalysisResult()
        lines.append(f"--- Round {record.round} ---")
        lines.append(f"Analysis: {analysis.reasoning}")
        lines.append(f"Achieved: {analysis.achieved}, Confidence: {analysis.confidence}")
        for s in record.steps:
            out = s.result or ""
            if not out:
                out = "(no output)"
            elif len(out) > limit:
                out = out[:limit] + "... (truncated)"
            lines.append(f"[{s.id}] status={s.status}: {out}")
        lines.append("")
    lines.append(P.REPLAN_FOOTER)
    return "\n".join(lines)


def synthesis_messages(goal: str, steps: Sequence[StepState], analysis: AnalysisResult | None, *,
                       truncation: int = 10_000) -> list[ChatMessage]:
    """Goal, step results (each cut) and the analyzer's reasoning."""
    blocks = []
    for s in steps:
        result = s.result or "(no result)"
        if len(result) > truncation:
            result = result[:truncation] + "\n[Result truncated]"
        blocks.append(f"[{s.id}] ({s.status}) {s.task}\n{result}")
    user = f"Goal: {goal}\n\nResults:\n" + ("\n\n".join(blocks) or "(none)")
    if analysis is not None and analysis.reasoning:
        user += f"\n\nAssessment: {analysis.reasoning}"
    return [ChatMessage(role="system", content=P.SYNTHESIS_SYSTEM),
            ChatMessage(role="user", content=user)]


def output_messages(goal: str, steps: Sequence[StepState], analysis: AnalysisResult | None,
                    schema: dict[str, Any], *, truncation: int = 10_000) -> list[ChatMessage]:
    """The synthesis' request for a DAG with an ``output_schema``: the same sources, and the
    answer asked for as JSON valid against the schema."""
    system, user = synthesis_messages(goal, steps, analysis, truncation=truncation)
    return [system, user.model_copy(update={"content": f"{user.content}\n\n{output_prompt(schema)}"})]


def fallback_answer(steps: Sequence[StepState]) -> str:
    """The completed steps' results when the goal was not achieved."""
    done = [f"**{s.id}**: {s.result or ''}" for s in steps if s.status == "completed"]
    return "\n\n---\n\n".join(done) if done else P.GOAL_NOT_ACHIEVED
