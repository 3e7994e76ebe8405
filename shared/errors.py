"""reactq's error types. One root, split by who is at fault.

    ReactqError
    ├── ConfigError            our misuse: a bad registry file, an unknown model, bad settings
    ├── RequestError           a caller's bad input, refused at the door (names the field)
    │   └── TooManyRequests    a per-run limit was reached (HTTP 429)
    ├── StructuredOutputError  (also a ValueError) every level of structured_llm_call failed
    ├── ToolNotFound           the LLM named a tool that is not available to the run
    ├── ToolError              a tool failed; the LLM sees it as an error observation
    ├── LLMError               the model endpoint failed after retries
    │   └── StreamIncomplete   a stream ended without its terminating chunk
    ├── RateLimited            flow control: the model has no capacity now; retry after ``wait_s``
    ├── CostCapReached         a dollar cap (a run's or batch's ``cost_budget_usd``, a tenant's day) refused a call
    ├── RunNotFound            no run (or DAG) with that id
    │   └── ScheduleNotFound   no schedule with that id
    ├── StateConflict          stored state cannot take this step (moved past it, or another version)
    ├── UsageError             a command line that cannot work (exit 2), naming the option
    ├── NoWorker               (also a TimeoutError) a run waited for a worker and none took it
    └── LocalServiceError      a process reactq starts for you (local workers, model server) did not come up

Every error pickles (Celery stores exceptions in its result backend).
"""

from __future__ import annotations


class ReactqError(Exception):
    """Root of every error reactq raises on purpose."""


class ConfigError(ReactqError):
    """reactq was configured wrongly; the message says which setting and why."""


class RequestError(ReactqError):
    """A request was refused at the door; ``field`` names the offending field."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.field))


class TooManyRequests(RequestError):
    """A per-run limit was reached (e.g. ``REACTQ_MAX_INTERRUPTS``): HTTP 429."""


class Forbidden(RequestError):
    """The caller's key lacks ``scope`` (HTTP 403 naming it)."""

    def __init__(self, scope: str, field: str | None = None) -> None:
        super().__init__(f"this API key lacks the scope {scope!r}", field=field)
        self.scope = scope

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.scope, self.field))


class StructuredOutputError(ReactqError, ValueError):
    """All structured extraction levels failed."""


class ToolNotFound(ReactqError):
    """The named tool is not registered or not allowed for this run."""


class ToolError(ReactqError):
    """A tool raised; its message becomes an error observation."""


class LLMError(ReactqError):
    """The LLM endpoint failed (after the client's retries)."""


class StreamIncomplete(LLMError):
    """A streamed completion stopped before ``[DONE]`` / a finish reason."""


class RateLimited(ReactqError):
    """A model's cluster-wide limits (or a provider's Retry-After) say: not now.

    The Celery shell gives the worker slot back and sends the step again in ``wait_s``."""

    def __init__(self, model: str, wait_s: float, reason: str = "rate") -> None:
        super().__init__(f"model {model!r} is rate-limited ({reason}); retry in {wait_s:.2f}s")
        self.model = model
        self.wait_s = wait_s
        self.reason = reason

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.model, self.wait_s, self.reason))


class CostCapReached(ReactqError):
    """A dollar cap was reached before an LLM call, which was not made: the run's
    ``cost_budget_usd`` (``whose="run"``), its batch's (``"batch"``) or its tenant's
    ``cost_per_day_usd`` (``"tenant"``).

    The run ends on the summary path; a DAG ends, or answers from its steps' results."""

    def __init__(self, whose: str, spent_usd: float, cap_usd: float) -> None:
        super().__init__(f"{cap_name(whose)} reached: ${spent_usd:.4f} of ${cap_usd:.4f} spent")
        self.whose = whose
        self.spent_usd = spent_usd
        self.cap_usd = cap_usd

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.whose, self.spent_usd, self.cap_usd))


class RunNotFound(ReactqError):
    """No run or DAG with that id exists (or it expired)."""


class ScheduleNotFound(RunNotFound):
    """No schedule with that id (HTTP 404, like an unknown run)."""


class StateConflict(ReactqError):
    """Stored state cannot take this step: the run moved past it, or it was written by a
    version of reactq this one cannot read."""


class UsageError(ReactqError):
    """A command line that cannot work: the CLI prints the message and exits 2."""


class LocalServiceError(ReactqError, RuntimeError):
    """A process reactq starts on the user's behalf did not come up; the message names its log."""


class ApprovalConflict(ReactqError):
    """A decision that cannot be taken: the approval was decided already (the message names
    how), its arguments' digest is not the one decided on, or the run is stopping."""

    def __init__(self, message: str, record: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.record = record


class ForkConflict(ReactqError):
    """A run (batch, DAG) cannot be forked as asked: it has not ended, or it did not fail
    and the fork is from its last failure (HTTP 409)."""


class NoWorker(ReactqError, TimeoutError):
    """A run is still queued and no worker answers: nothing will take it until one starts."""


def cap_name(whose: str) -> str:
    """How a message names a dollar cap (``CostCapReached.whose``)."""
    return {"run": "Cost budget", "batch": "The batch's cost budget"}.get(whose, "The tenant's daily cost cap")
