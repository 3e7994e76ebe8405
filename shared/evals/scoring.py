"""Evaluators: what scores a finished case, and the built-in ones.

An evaluator is called as ``fn(case, result)`` (an ``EvalCase`` and a ``CaseResult``) and
answers ``bool``, a ``float`` in 0..1, or a ``Score(value, reason)``; a float passes at
≥ 0.5. One that does not apply to a case (``exact`` without ``expected``, ``max_turns``
without ``metadata.max_turns``…) raises ``NotApplicable`` or returns None: the case has no
score from it and is left out of its pass rate. One that raises anything else scores 0 with
the error as its reason; the eval goes on.

Custom evaluators are functions decorated with ``@reactq.evaluator("name")`` and named in
``REACTQ_EVALUATORS`` (``module:attr``, comma-separated; an entry may name one evaluator or a
list of them). ``judge`` is built in but asks an LLM (``reactq.shared.evals.judge``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from reactq.shared.errors import ConfigError, RequestError
from reactq.shared.evals.cases import EvalCase
from reactq.shared.plugins import entry_error, import_entry, split_spec

__all__ = ["BUILTINS", "JUDGE", "CaseResult", "Evaluator", "NotApplicable", "Score", "apply",
           "evaluator", "load_evaluators", "resolve"]

#: The name of the LLM-graded evaluator (scored by ``judge.py``, not by ``apply``).
JUDGE = "judge"
#: A float score passes at this value or more.
PASS_AT = 0.5


@dataclass(frozen=True)
class Score:
    """An evaluator's verdict on one case: ``value`` in 0..1 and why."""

    value: float
    reason: str | None = None

    @property
    def passed(self) -> bool:
        return self.value >= PASS_AT

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "passed": self.passed, "reason": self.reason}


class NotApplicable(Exception):
    """The evaluator has nothing to check on this case (a field it needs is not set)."""


@dataclass
class CaseResult:
    """What an evaluator sees of a case's run."""

    case_id: str
    run_id: str | None
    status: str
    """``succeeded``, ``failed``, ``cancelled``, ``skipped``."""
    answer: str | None = None
    output: Any = None
    error: str | None = None
    turns: int = 0
    """The loop's LLM calls (``thinking start`` events)."""
    cost_usd: float = 0.0
    tokens: int = 0
    latency_ms: float = 0.0
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """``{name, args}`` of each call the run made, in order."""


EvaluatorFn = Callable[[EvalCase, CaseResult], Any]


@dataclass(frozen=True)
class Evaluator:
    """A named evaluator (what ``@reactq.evaluator`` makes)."""

    name: str
    fn: EvaluatorFn

    def __call__(self, case: EvalCase, result: CaseResult) -> Any:
        return self.fn(case, result)


NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def evaluator(name: str) -> Callable[[EvaluatorFn], Evaluator]:
    """``@reactq.evaluator("name")``: a function ``(case, result) -> bool | float | Score``."""
    if not NAME.match(name):
        raise ConfigError(f"evaluator name {name!r}: letters, digits, '_', '-', '.' (at most 64)")

    def wrap(fn: EvaluatorFn) -> Evaluator:
        return Evaluator(name, fn)
    return wrap


def as_score(value: Any) -> Score | None:
    """What an evaluator answered, as a ``Score`` (None: it does not apply)."""
    if value is None or isinstance(value, Score):
        return value
    if isinstance(value, bool):
        return Score(1.0 if value else 0.0)
    if isinstance(value, (int, float)):
        v = float(value)
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"a score must be between 0 and 1, got {v}")
        return Score(v)
    raise TypeError(f"an evaluator answers bool, float or Score, got {type(value).__name__}")


def apply(ev: Evaluator, case: EvalCase, result: CaseResult) -> Score | None:
    """``ev``'s score of the case; an evaluator that raises scores 0 with the error as reason."""
    try:
        return as_score(ev(case, result))
    except NotApplicable:
        return None
    except Exception as exc:  # a buggy evaluator must not stop the eval
        return Score(0.0, f"evaluator {ev.name!r} raised {type(exc).__name__}: {str(exc)[:300]}")


# -- the built-ins -----------------------------------------------------------------------------

def _expected(case: EvalCase) -> Any:
    if case.expected is None:
        raise NotApplicable
    return case.expected


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def exact(case: EvalCase, result: CaseResult) -> Score:
    want = _expected(case)
    if case.output_schema is not None:
        if isinstance(want, str):
            try:
                want = json.loads(want)
            except json.JSONDecodeError:
                pass
        ok = result.output == want
        return Score(float(ok), None if ok else f"output {_as_text(result.output)[:200]} is not {_as_text(want)[:200]}")
    got = (result.answer or "").strip()
    ok = got == _as_text(want).strip()
    return Score(float(ok), None if ok else f"answer {got[:200]!r} is not the expected text")


def contains(case: EvalCase, result: CaseResult) -> Score:
    want = _expected(case)
    wanted = [want] if isinstance(want, str) else [_as_text(w) for w in want] if isinstance(want, list) else [_as_text(want)]
    text = (result.answer or "").casefold()
    missing = [w for w in wanted if w.casefold() not in text]
    return Score(0.0 if missing else 1.0, f"missing: {missing[:5]}" if missing else None)


def regex(case: EvalCase, result: CaseResult) -> Score:
    pattern = _expected(case)
    if not isinstance(pattern, str):
        raise ValueError("expected must be a regular expression (a string)")
    ok = re.search(pattern, result.answer or "") is not None
    return Score(float(ok), None if ok else f"no match for {pattern[:100]!r}")


def json_schema(case: EvalCase, result: CaseResult) -> Score:
    import jsonschema

    if case.output_schema is None:
        raise NotApplicable
    value = result.output
    if value is None:
        try:
            value = json.loads(result.answer or "")
        except json.JSONDecodeError:
            return Score(0.0, "the answer is not JSON")
    errors = sorted(jsonschema.Draft202012Validator(case.output_schema).iter_errors(value), key=lambda e: list(e.path))
    if errors:
        path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in errors[0].path)
        return Score(0.0, f"{path}: {errors[0].message[:200]}")
    return Score(1.0)


def _subset(want: dict[str, Any] | None, got: dict[str, Any]) -> bool:
    return all(k in got and got[k] == v for k, v in (want or {}).items())


def tool_calls(case: EvalCase, result: CaseResult) -> Score:
    if case.expected_tools is None:
        raise NotApplicable
    calls = iter(result.tool_calls)
    for n, want in enumerate(case.expected_tools):
        if not any(c.get("name") == want.name and _subset(want.args, c.get("args") or {}) for c in calls):
            made = [c.get("name") for c in result.tool_calls]
            return Score(0.0, f"expected call {n + 1} ({want.name}) not made in order; calls made: {made[:20]}")
    return Score(1.0)


def _limit(case: EvalCase, key: str) -> float:
    raw = case.metadata.get(key)
    if raw is None:
        raise NotApplicable
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise ValueError(f"metadata.{key} must be a number")
    return float(raw)


def max_turns(case: EvalCase, result: CaseResult) -> Score:
    limit = _limit(case, "max_turns")
    ok = result.turns <= limit
    return Score(float(ok), None if ok else f"{result.turns} turns, over {limit:g}")


def max_cost_usd(case: EvalCase, result: CaseResult) -> Score:
    limit = _limit(case, "max_cost_usd")
    ok = result.cost_usd <= limit
    return Score(float(ok), None if ok else f"${result.cost_usd:.6f}, over ${limit:g}")


def _judge_placeholder(case: EvalCase, result: CaseResult) -> Score:
    raise NotApplicable  # scored by judge.py, which needs an LLM


BUILTINS: dict[str, Evaluator] = {e.name: e for e in (
    Evaluator("exact", exact), Evaluator("contains", contains), Evaluator("regex", regex),
    Evaluator("json_schema", json_schema), Evaluator("tool_calls", tool_calls),
    Evaluator(JUDGE, _judge_placeholder), Evaluator("max_turns", max_turns),
    Evaluator("max_cost_usd", max_cost_usd))}


def _flatten(obj: object) -> Iterable[object]:
    if isinstance(obj, (list, tuple)):
        return obj
    return [obj]


def load_evaluators(spec: str | None) -> dict[str, Evaluator]:
    """The custom evaluators named in ``REACTQ_EVALUATORS`` (``ConfigError`` naming a bad entry)."""
    found: dict[str, Evaluator] = {}
    for entry in split_spec(spec):
        for obj in _flatten(import_entry(entry, setting="REACTQ_EVALUATORS")):
            if not isinstance(obj, Evaluator):
                raise entry_error("REACTQ_EVALUATORS", entry,
                                  f"expected a function decorated with @reactq.evaluator, got {type(obj).__name__}")
            if obj.name in BUILTINS:
                raise entry_error("REACTQ_EVALUATORS", entry, f"{obj.name!r} is a built-in evaluator's name")
            found[obj.name] = obj
    return found


def resolve(names: list[str], custom: dict[str, Evaluator]) -> list[Evaluator]:
    """The evaluators an eval asked for, in order (``RequestError`` naming an unknown one)."""
    known = {**BUILTINS, **custom}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise RequestError(f"unknown evaluators {unknown[:10]}; known: {sorted(known)}", field="evaluators")
    return [known[n] for n in dict.fromkeys(names)]
