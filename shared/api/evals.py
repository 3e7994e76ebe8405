"""Eval bodies: ``POST /v1/evals`` in, and what the eval routes answer."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from reactq.shared.api.base import ApiModel

EvalStatusName = Literal["running", "done", "cancelled"]

#: The most cases one eval takes.
MAX_CASES = 10_000


class EvalOptions(BaseModel):
    """How an eval runs and is scored (``reactq eval``'s options; ``POST /v1/evals`` adds the cases)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str | None = Field(None, max_length=200)
    """A name to find it by (``GET /v1/evals``)."""
    evaluators: list[str] = Field(..., min_length=1, max_length=50)
    """Built-in (``exact``, ``contains``, ``regex``, ``json_schema``, ``tool_calls``, ``judge``,
    ``max_turns``, ``max_cost_usd``) or custom (``REACTQ_EVALUATORS``) evaluators."""
    model: str | None = None
    """The model of every case that names none."""
    judge_model: str | None = None
    """The registry model ``judge`` asks (default: the registry's ``smart`` role)."""
    system_prompt: str | None = Field(None, max_length=100_000)
    """The system prompt of every case's run (a prompt change is an eval to compare)."""
    concurrency: StrictInt = Field(8, ge=1, le=1000)
    """Runs in flight at most."""
    replay_from: str | None = Field(None, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")
    """An earlier eval: each case's tool calls are answered from its run of the same case id."""
    live_tools: StrictBool = False
    """With ``replay_from``: a call the earlier eval did not record runs (else it is not run)."""


class EvalIn(EvalOptions):
    """An eval: every case runs as a line of one batch and each finished run is scored."""

    cases: list[Any] = Field(..., min_length=1, max_length=MAX_CASES)
    """``{id, query, expected?, expected_tools?, output_schema?, tools?, model?, metadata?}`` each
    (a bad one is reported ``invalid``; the others run)."""


class EvalCreated(ApiModel):
    """An eval was accepted (202): its cases run as the batch ``batch_id``."""

    eval_id: str
    batch_id: str
    total: int
    """Cases (lines) in it."""
    invalid: list[dict[str, Any]]
    """Cases refused: ``{line, id, error}``."""


class EvalScore(ApiModel):
    pass_rate: float | None
    """Of the cases this evaluator scored, the share that passed."""
    mean: float | None
    scored: int = 0


class Latency(ApiModel):
    p50: float | None
    p95: float | None


class EvalView(ApiModel):
    """An eval (``GET /v1/evals/{id}``): its counts and scores so far."""

    eval_id: str
    name: str | None
    status: EvalStatusName
    batch_id: str | None
    config: dict[str, Any]
    """evaluators, model, judge_model, system_prompt, replay_from, live_tools."""
    counts: dict[str, int]
    """total, done, passed, succeeded, failed, cancelled, skipped, invalid."""
    pass_rate: float | None
    """Cases that passed every evaluator that applies, of the cases that ran."""
    scores: dict[str, EvalScore]
    cost_usd: float
    """The runs' dollars."""
    judge_cost_usd: float
    """The judge's dollars (apart from the runs')."""
    tokens: int
    latency_ms: Latency
    created_at: float
    updated_at: float


class EvalRow(ApiModel):
    eval_id: str
    name: str | None
    status: EvalStatusName
    batch_id: str | None
    total: int
    pass_rate: float | None
    created_at: float
    updated_at: float


class EvalPage(ApiModel):
    evals: list[EvalRow]
    next_cursor: str | None


class CaseScore(ApiModel):
    value: float
    passed: bool
    reason: str | None


class EvalCaseRow(ApiModel):
    case_id: str | None
    line: int
    run_id: str | None
    status: str
    scores: dict[str, CaseScore]
    answer: str | None
    output: Any = None
    error: str | None = None
    passed: bool
    cost_usd: float
    judge_cost_usd: float = 0.0
    tokens: int = 0
    turns: int
    latency_ms: float | None = None


class EvalCasePage(ApiModel):
    cases: list[EvalCaseRow]
    next_cursor: str | None


class EvalCompare(ApiModel):
    """``GET /v1/evals/{a}/compare/{b}``: per case what changed, and the aggregate deltas."""

    a: str
    b: str
    fixed: list[str]
    """Cases that failed in ``a`` and pass in ``b``."""
    broken: list[str]
    """Cases that passed in ``a`` and fail in ``b``."""
    cases: list[dict[str, Any]]
    """``{case_id, flipped, status: {a, b}, scores: {evaluator: {a, b}}}`` of each case that changed."""
    only_in_a: list[str]
    only_in_b: list[str]
    deltas: dict[str, Any]
    """b − a: pass_rate, per evaluator pass_rate and mean, cost_usd, judge_cost_usd, latency_ms."""
