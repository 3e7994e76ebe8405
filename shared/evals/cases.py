"""An eval's cases: one JSON object each (a JSONL line, or an item of ``POST /v1/evals``).

``{id, query, expected?, expected_tools?: [{name, args?}], output_schema?, tools?, model?,
metadata?}``. A case becomes one batch line: a ``RunRequest`` with its query, tools, model,
output schema and metadata (the eval's ``model`` and ``system_prompt`` fill what the case
leaves unset). A bad case (not JSON, not an object, an unknown field, a field out of range)
is ``invalid``: its error names the line and the field, and the other cases run.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from reactq.shared.errors import RequestError
from reactq.shared.inputs import loads_strict

__all__ = ["EvalCase", "ExpectedTool", "InvalidCase", "parse_case", "parse_case_line", "run_fields"]


class ExpectedTool(BaseModel):
    """A tool the run must call: its name, and arguments the call's must include."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=1, max_length=200)
    args: dict[str, Any] | None = None


class EvalCase(BaseModel):
    """One case of an eval."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    id: str | StrictInt
    """The case's name: the same id across evals is the same case (compare, replay)."""
    query: str = Field(..., min_length=1, max_length=100_000)
    expected: Any = None
    """What ``exact``, ``contains``, ``regex`` and ``judge`` compare the answer with."""
    expected_tools: list[ExpectedTool] | None = Field(None, max_length=100)
    """The tools the run must call, in this order (``tool_calls``)."""
    output_schema: dict[str, Any] | None = None
    tools: list[str] | None = None
    model: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Passed to the run; ``max_turns`` and ``max_cost_usd`` read their limits here."""

    @field_validator("id")
    @classmethod
    def _id(cls, v: str | int) -> str | int:
        if isinstance(v, str) and not (0 < len(v) <= 200):
            raise ValueError("must be a non-empty string of at most 200 characters, or an integer")
        return v

    @property
    def key(self) -> str:
        """The id as a string (how stores and comparisons name the case)."""
        return str(self.id)


class InvalidCase(BaseModel):
    """A line that is not a case: where it was and why."""

    line: int
    id: str | int | None = None
    error: str


def _format(exc: ValidationError, line: int) -> str:
    parts = [f"{'.'.join(str(p) for p in e['loc']) or '<case>'}: {e['msg']}" for e in exc.errors(include_url=False)]
    return f"line {line}: " + "; ".join(parts)


def parse_case(obj: Any, line: int) -> EvalCase | InvalidCase:
    """One decoded object → a case, or why it is not one (naming the line and the field)."""
    if not isinstance(obj, dict):
        return InvalidCase(line=line, error=f"line {line}: expected a JSON object, got {type(obj).__name__}")
    raw_id = obj.get("id")
    case_id = raw_id if isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool) else None
    try:
        return EvalCase.model_validate(obj)
    except ValidationError as exc:
        return InvalidCase(line=line, id=case_id, error=_format(exc, line))


def parse_case_line(text: str, line: int) -> EvalCase | InvalidCase:
    """One JSONL line (strict JSON: no NaN, not nested too deep)."""
    try:
        obj = loads_strict(text, field=None)
    except RequestError as exc:
        return InvalidCase(line=line, error=f"line {line}: {str(exc).removeprefix('is ')}")
    return parse_case(obj, line)


def run_fields(case: EvalCase, *, model: str | None = None, system_prompt: str | None = None) -> dict[str, Any]:
    """The batch line (a ``RunRequest`` body with the case's id) that runs ``case``."""
    body: dict[str, Any] = {"id": case.id, "query": case.query, "metadata": dict(case.metadata)}
    for name, value in (("tools", case.tools), ("model", case.model or model),
                        ("output_schema", case.output_schema), ("system_prompt", system_prompt)):
        if value is not None:
            body[name] = value
    return body
