"""The analyzer: did this round achieve the goal?. Never raises: an unusable reply is
the default verdict ``achieved=False, confidence=0.0, "Could not parse analysis response"``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from reactq.shared.engine.structured import structured_llm_call
from reactq.shared.llm.base import LLM
from reactq.shared.models import ChatMessage, Usage

from . import prompts as P
from .models import AnalysisResult, parse_analysis_data

__all__ = ["AnalysisOutcome", "StepView", "analysis_messages", "analyze", "format_step_results"]

DEFAULT_ANALYSIS = AnalysisResult(achieved=False, confidence=0.0,
                                  reasoning="Could not parse analysis response")


class StepView(Protocol):
    """What the analyzer reads of a step (``StepState`` fits). Read-only, so a step whose
    ``status`` is a narrower type fits too."""

    @property
    def id(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def dependencies(self) -> list[str]: ...
    @property
    def tool_hint(self) -> str | None: ...
    @property
    def result(self) -> str | None: ...


@dataclass
class AnalysisOutcome:
    analysis: AnalysisResult
    usage: Usage
    llm_calls: int


def format_step_results(steps: Sequence[StepView], truncation: int = 10_000) -> str:
    """One block per step, results cut to ``truncation`` characters."""
    if not steps:
        return "(no steps in plan)"
    blocks = []
    for s in steps:
        result = s.result or "(no result)"
        if s.result and len(result) > truncation:
            result = result[:truncation] + P.RESULT_TRUNCATED
        deps = ", ".join(s.dependencies) or "none"
        blocks.append(f"[{s.id}] (status: {s.status}, deps: {deps}, tool_hint: {s.tool_hint or 'none'})"
                      f"\n  Task: {s.task}\n  Result: {result}")
    return "\n\n".join(blocks)


def analysis_messages(goal: str, steps: Sequence[StepView], *,
                      truncation: int = 10_000) -> list[ChatMessage]:
    user = f"Goal to evaluate: {goal}\n\nStep results:\n{format_step_results(steps, truncation)}"
    return [ChatMessage(role="system", content=P.ANALYZER_SYSTEM),
            ChatMessage(role="user", content=user)]


async def analyze(llm: LLM, goal: str, steps: Sequence[StepView], *,
                  truncation: int = 10_000) -> AnalysisOutcome:
    """One ``analyze_plan`` call; the default verdict when nothing usable came back."""
    result = await structured_llm_call(
        llm, analysis_messages(goal, steps, truncation=truncation), P.ANALYSIS_SCHEMA,
        P.ANALYZE_FUNCTION, parse_fn=parse_analysis_data, regex_fallback=_regex_fallback,
        default_value=DEFAULT_ANALYSIS)
    return AnalysisOutcome(result.value, result.total_usage, result.llm_calls)


_ACHIEVED = re.compile(r"[\"']?achieved[\"']?\s*[:=]\s*[\"']?(true|false|yes|no)", re.I)
_CONFIDENCE = re.compile(r"[\"']?confidence[\"']?\s*[:=]\s*[\"']?(-?[0-9]*\.?[0-9]+)", re.I)
_REASONING = re.compile(r"[\"']?reasoning[\"']?\s*[:=]\s*[\"']?(.+?)[\"']?\s*(?:,\s*$|$)", re.I | re.M)


def _regex_fallback(text: str) -> dict[str, Any] | None:
    """Key/value pairs from prose such as ``achieved: true, confidence: 0.9``."""
    achieved = _ACHIEVED.search(text)
    if achieved is None:
        return None
    data: dict[str, Any] = {"achieved": achieved.group(1).lower() in ("true", "yes")}
    confidence = _CONFIDENCE.search(text)
    data["confidence"] = confidence.group(1) if confidence else 0.0
    reasoning = _REASONING.search(text)
    data["reasoning"] = reasoning.group(1) if reasoning else text[:500]
    return data
