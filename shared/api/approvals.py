"""Bodies of the approval routes: a run's approvals, the operators' inbox, a decision."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from reactq.shared.api.base import ApiModel

ApprovalStatusName = Literal["pending", "approved", "rejected", "edited", "responded", "expired", "cancelled"]
MAX_MESSAGE = 20_000


class Approval(ApiModel):
    """A tool call that waits for (or was given) a person's decision."""

    approval_id: str
    """The approval's id."""
    run_id: str
    """The run that made the call."""
    tool_call_id: str
    """The call's id in the run."""
    tool_name: str
    """The tool it calls."""
    tool_args: dict[str, Any]
    """The arguments as the model wrote them."""
    args_digest: str
    """Hex SHA-256 of ``tool_args`` as canonical JSON (sorted keys, no spaces, UTF-8)."""
    reason: str | None = None
    """Why it waits (the tool's flag, the run's policy, or a hook's reason)."""
    requested_at: float
    """Unix time it was requested."""
    expires_at: float
    """Unix time its ``on_timeout`` applies."""
    on_timeout: Literal["reject", "approve"] = "reject"
    """What expiry does."""
    status: ApprovalStatusName
    """Where it is."""
    decided_at: float | None = None
    """Unix time it was decided."""
    decided_by: str | None = None
    """Who decided (``timeout`` for an expiry)."""
    approved_args: dict[str, Any] | None = None
    """An edit's arguments."""
    message: str | None = None
    """A rejection's message, or a response."""


class RunApprovals(ApiModel):
    """``GET /v1/runs/{id}/approvals``: every approval of the run, oldest first."""

    approvals: list[Approval]


class ApprovalPage(ApiModel):
    """``GET /v1/approvals``: pending approvals of every run, oldest first."""

    approvals: list[Approval]
    next_cursor: str | None = None
    """The next page's cursor; null on the last page."""


class DecisionIn(BaseModel):
    """A person's decision on one pending approval."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    decision: Literal["approve", "reject", "edit", "respond"]
    """approve, edit (with ``args``), reject (optional ``message``), respond (``message``)."""
    args_digest: str = Field(..., pattern=r"^[0-9a-f]{64}$")
    """The ``args_digest`` of the request the decider saw (hex SHA-256)."""
    args: dict[str, Any] | None = None
    """``edit``: the arguments to run the call with."""
    message: str | None = Field(None, max_length=MAX_MESSAGE)
    """``reject``: shown to the model; ``respond``: the call's answer."""
    by: str | None = Field(None, max_length=200)
    """Who decided (kept with the approval)."""


class Decided(ApiModel):
    """A decision was taken."""

    approval_id: str
    """The approval's id."""
    status: ApprovalStatusName
    """Its status now."""
