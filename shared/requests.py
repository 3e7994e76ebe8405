"""Requests accepted at the door: ``RunRequest`` and ``DagRequest`` (DESIGN.md "Public contract").

Validation happens here, before anything is enqueued; errors name the field and the limit.
Checks that need the registries (unknown model or tool names) are in ``check_run_request``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator

from reactq.shared.errors import RequestError

Mode = Literal["auto", "json", "native"]
MultitaskStrategy = Literal["inject", "enqueue", "reject", "interrupt", "rollback"]
#: A thread id is also a Redis Cluster hash tag (``reactq:thread:{id}``): no braces in it.
THREAD_ID_PATTERN = r"^[A-Za-z0-9._:-]+$"
ModelHint = Literal["fast", "reasoning"]
Priority = Literal["interactive", "batch"]


class RunRequest(BaseModel):
    """One agent run."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(..., min_length=1, max_length=100_000)
    model: str | None = None
    tools: list[str] | None = None
    mode: Mode = "auto"
    # Strict: ``true`` or ``"5"`` is a client's mistake, not an iteration count.
    max_iterations: StrictInt | None = Field(None, ge=1, le=200)
    """None: ``REACTQ_MAX_ITERATIONS`` (50)."""
    completion_check: StrictBool = True
    system_prompt: str | None = Field(None, max_length=100_000)
    metadata: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: str | None = Field(None, min_length=1, max_length=200)
    thread_id: str | None = Field(None, min_length=1, max_length=200, pattern=THREAD_ID_PATTERN)
    """Runs with one thread id share a conversation (DESIGN "Threads and double texting")."""
    multitask_strategy: MultitaskStrategy = "inject"
    """What this run does while another run of its thread is active."""
    priority: Priority = "interactive"
    """Who gets a rate-limited model's capacity first (batch lines default to ``batch``)."""
    token_budget: int | None = Field(None, ge=1)
    """The run's cap on LLM tokens (every call paid); reached ⇒ the max-iterations summary."""
    cost_budget_usd: float | None = Field(None, gt=0, le=1_000_000)
    """The run's cap in US dollars (every call priced); reached ⇒ the summary path. Its
    model must have a price (else 422 at the door)."""

    @field_validator("query")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("query must contain non-whitespace characters")
        return v


class PlanStepIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(..., min_length=1, max_length=100)
    task: str = Field(..., min_length=1, max_length=20_000)
    dependencies: list[str] = Field(default_factory=list)
    tool_hint: str | None = None
    model_hint: ModelHint | None = None


class DagRequest(BaseModel):
    """A goal, optionally with a user-supplied plan."""

    model_config = ConfigDict(extra="forbid")

    goal: str = Field(..., min_length=1, max_length=100_000)
    steps: list[PlanStepIn] | None = Field(None, max_length=100)
    model: str | None = None
    tools: list[str] | None = None
    max_concurrency: StrictInt = Field(5, ge=1, le=50)
    max_rounds: StrictInt = Field(3, ge=1, le=5)
    metadata: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: str | None = Field(None, min_length=1, max_length=200)


def check_names(field: str, names: list[str] | None, known: list[str], what: str) -> None:
    """Refuse names that are not registered, naming the field and what is available."""
    if names is None:
        return
    unknown = [n for n in names if n not in known]
    if unknown:
        raise RequestError(
            f"{field}: unknown {what} {unknown}; available: {sorted(known)}", field=field
        )


def check_run_request(req: RunRequest, *, tools: list[str], models: list[str]) -> None:
    """The registry-dependent part of validation (unknown tool or model names)."""
    check_names("tools", req.tools, tools, "tool names")
    if req.model is not None:
        check_names("model", [req.model], models, "model")


def models_called(model: str | None, specs: list[dict[str, Any]]) -> list[str]:
    """The models a run of ``model`` (None: the default) may call: its own, and the ``fast``
    role's (tool selection, compaction). ``specs``: the catalog's model entries, in order."""
    def first(role: str) -> str | None:
        return next((s["name"] for s in specs if role in (s.get("roles") or [])), None)

    own = model or first("general") or (specs[0]["name"] if specs else None)
    names = [n for n in (own, first("fast") or own) if n is not None]
    return list(dict.fromkeys(names))


def check_priced(field: str, model: str | None, specs: list[dict[str, Any]]) -> None:
    """A dollar cap needs every model the work may call to have a price: a cap that silently
    covers only part of the spend is refused at the door."""
    priced = {s["name"] for s in specs if s.get("price")}
    unpriced = [n for n in models_called(model, specs) if n not in priced]
    if unpriced:
        raise RequestError(f"{field}: model {unpriced[0]!r} has no price in the model registry "
                           "(price = {input_per_mtok, output_per_mtok}), so a dollar cap cannot "
                           "be enforced", field=field)
