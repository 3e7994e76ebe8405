"""Plans, steps and analyses, and the validation every plan goes through.

What callers may rely on:

* ``parse_plan_data(data)`` is the planner's lenient parser: ``steps`` given as one
  object, as a JSON string, or as step fields at the top level are all recovered; anything
  else is ``None`` (so ``structured_llm_call`` degrades to its next level).
* ``validate_steps(steps)`` prunes dangling dependencies with a warning (never an error),
  and refuses a cycle (self-dependency included) with ``CycleError`` naming exactly the
  steps that lie on a cycle (Kahn's algorithm). ``check_unique_ids`` refuses repeated
  ids; ``dedupe_ids`` keeps the first of each instead (for a model's plan).
* Every error here is a ``PlanError``, itself a ``ValueError`` and a
  ``ReactqError``; all pickle.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from reactq.shared.errors import ReactqError

__all__ = ["AnalysisResult", "CycleError", "DuplicateStepError", "ExecutionPlan", "ModelHint",
           "ParsedPlan", "PlanError", "PlanStep", "PlanTooLargeError", "check_unique_ids",
           "dedupe_ids", "find_cycle", "parse_analysis_data", "parse_plan_data", "validate_steps"]

ModelHint = Literal["fast", "reasoning"]
MODEL_HINTS: tuple[str, ...] = ("fast", "reasoning")


class PlanError(ReactqError, ValueError):
    """A plan that cannot run as given."""


class CycleError(PlanError):
    """The dependencies form a cycle; ``steps`` are the ids on it (sorted)."""

    def __init__(self, steps: Sequence[str]) -> None:
        self.steps = list(steps)
        super().__init__(f"Circular dependency detected among steps: {self.steps}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.steps,))


class DuplicateStepError(PlanError):
    """Two steps share an id."""

    def __init__(self, ids: Sequence[str]) -> None:
        self.ids = list(ids)
        super().__init__(f"Step ids must be unique; repeated: {self.ids}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.ids,))


class PlanTooLargeError(PlanError):
    """More steps than the configured cap (``REACTQ_DAG_MAX_STEPS``)."""

    def __init__(self, count: int, cap: int) -> None:
        self.count, self.cap = count, cap
        super().__init__(f"A plan may have at most {cap} steps (REACTQ_DAG_MAX_STEPS); "
                         f"this one has {count}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.count, self.cap))


class PlanStep(BaseModel):
    """One step as planned: what to do and what it needs first."""

    id: str
    task: str
    dependencies: list[str] = Field(default_factory=list)
    tool_hint: str | None = None
    model_hint: ModelHint | None = None
    """``fast`` / ``reasoning`` pick the step's model by role; ``None`` = ``general``."""


class ExecutionPlan(BaseModel):
    """A validated plan for one round."""

    goal: str
    steps: list[PlanStep] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    """What validation changed (pruned dependencies, dropped hints or duplicate ids)."""


class ParsedPlan(BaseModel):
    """``parse_plan_data``'s result: steps as given, plus what parsing had to change."""

    steps: list[PlanStep]
    warnings: list[str] = Field(default_factory=list)


class AnalysisResult(BaseModel):
    """The analyzer's verdict on a round; ``confidence`` is always within [0, 1]."""

    achieved: bool = False
    confidence: float = 0.0
    reasoning: str = ""
    final_answer: str | None = None


# -- lenient parsing -----------------------------------------------------------------

def parse_plan_data(data: dict[str, Any]) -> ParsedPlan | None:
    """Recover a step list from whatever shape the model produced; ``None`` = unusable."""
    raw = _raw_steps(data)
    if raw is None:
        return None
    steps: list[PlanStep] = []
    warnings: list[str] = []
    for item in raw:
        step = _coerce_step(item, warnings)
        if step is None:
            return None
        steps.append(step)
    return ParsedPlan(steps=steps, warnings=warnings)


def _raw_steps(data: dict[str, Any]) -> list[Any] | None:
    if "steps" not in data:
        # A lone step object without the {"steps": [...]} wrapper.
        return [data] if "id" in data and "task" in data else None
    steps = data["steps"]
    if isinstance(steps, str):
        # Double-encoded: the model put a JSON string where the array belongs.
        try:
            steps = json.loads(steps)
        except ValueError:
            return None
    if isinstance(steps, dict):
        steps = [steps]
    return steps if isinstance(steps, list) else None


def _coerce_step(item: Any, warnings: list[str]) -> PlanStep | None:
    if not isinstance(item, dict) or item.get("id") in (None, "") or item.get("task") in (None, ""):
        return None
    step_id = str(item["id"]).strip()
    deps = item.get("dependencies") or []
    if isinstance(deps, (str, int)):
        deps = [deps]
    if not isinstance(deps, list):
        return None
    hint = item.get("model_hint")
    if hint is not None and hint not in MODEL_HINTS:
        warnings.append(f"Step '{step_id}': unknown model_hint {hint!r} ignored "
                        f"(expected one of {list(MODEL_HINTS)} or null)")
        hint = None
    tool_hint = item.get("tool_hint")
    return PlanStep(id=step_id, task=str(item["task"]).strip(),
                    dependencies=[str(d).strip() for d in deps if str(d).strip()],
                    tool_hint=str(tool_hint).strip() or None if tool_hint else None,
                    model_hint=hint)


def parse_analysis_data(data: dict[str, Any]) -> AnalysisResult | None:
    """The analyzer's JSON as a verdict; without ``achieved`` it is unusable."""
    if "achieved" not in data:
        return None
    achieved = data["achieved"]
    if isinstance(achieved, str):
        achieved = achieved.strip().lower() in ("true", "yes", "1")
    final = data.get("final_answer")
    return AnalysisResult(achieved=bool(achieved), confidence=_clamp(data.get("confidence")),
                          reasoning=str(data.get("reasoning") or ""),
                          final_answer=None if final in (None, "") else str(final))


def _clamp(value: Any) -> float:
    """Confidence within [0, 1]; anything that is not a number is 0.0."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    if number != number:  # NaN
        return 0.0
    return min(1.0, max(0.0, number))


# -- validation ----------------------------------------------------------------------

def check_unique_ids(steps: Iterable[PlanStep]) -> None:
    """Refuse a plan whose ids repeat (a user's plan: guessing which one was meant is worse)."""
    seen: set[str] = set()
    repeated: list[str] = []
    for step in steps:
        if step.id in seen and step.id not in repeated:
            repeated.append(step.id)
        seen.add(step.id)
    if repeated:
        raise DuplicateStepError(repeated)


def dedupe_ids(steps: Iterable[PlanStep]) -> tuple[list[PlanStep], list[str]]:
    """Keep the first step of each id (a model's plan: a repeat is usually a slip)."""
    kept: dict[str, PlanStep] = {}
    warnings: list[str] = []
    for step in steps:
        if step.id in kept:
            warnings.append(f"Step id '{step.id}' is repeated; only its first step was kept")
            continue
        kept[step.id] = step
    return list(kept.values()), warnings


def validate_steps(steps: Sequence[PlanStep]) -> tuple[list[PlanStep], list[str]]:
    """Prune dangling dependencies (with warnings), then refuse cycles. Ids must be unique."""
    ids = {s.id for s in steps}
    out: list[PlanStep] = []
    warnings: list[str] = []
    for step in steps:
        deps = list(dict.fromkeys(step.dependencies))  # repeated deps are one dependency
        dangling = [d for d in deps if d not in ids]
        if dangling:
            warnings.append(f"Step '{step.id}' depends on unknown step(s) {dangling}; "
                            "dependency removed")
        out.append(step.model_copy(update={"dependencies": [d for d in deps if d in ids]}))
    cycle = find_cycle(out)
    if cycle:
        raise CycleError(cycle)
    return out, warnings


def find_cycle(steps: Sequence[PlanStep]) -> list[str]:
    """The ids lying on a cycle (sorted), ``[]`` for a DAG.

    Kahn's algorithm removes every step that can run; what is left is cycles plus steps
    that wait on them. Peeling, in reverse, the leftovers nothing else is waiting on leaves
    only the steps on a cycle, so the error names the culprits, not their victims.
    """
    deps = {s.id: set(s.dependencies) for s in steps}
    indegree = {sid: len(d) for sid, d in deps.items()}
    dependents: dict[str, set[str]] = {sid: set() for sid in deps}
    for sid, ds in deps.items():
        for d in ds:
            dependents.setdefault(d, set()).add(sid)
    ready = [sid for sid, n in indegree.items() if n == 0]
    while ready:
        sid = ready.pop()
        for child in dependents.get(sid, ()):
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    left = {sid for sid, n in indegree.items() if n > 0}
    changed = True
    while changed:
        changed = False
        for sid in list(left):
            if not (dependents.get(sid, set()) & left):
                left.discard(sid)
                changed = True
    return sorted(left)
