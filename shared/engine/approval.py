"""Approvals as pure logic: which call waits for a person, what the request and the decision
look like, and what the model is told.

A call waits when its tool says ``requires_approval``, when the run's ``approval`` policy
names it (or says ``"all"``), or when a PreToolUse hook answers ``HookResult(ask=True)``.
Its approval is bound to ``args_digest``: the hex SHA-256 of the arguments as canonical JSON
(sorted keys, no spaces, UTF-8), so a decision names the very arguments the person saw.

No I/O here: the Celery shell stores requests and decisions in Redis (``shared/stores/
approvals.py``), the in-process shell asks a callback.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from reactq.shared.engine.state import ToolOutcome

Decision = Literal["approve", "reject", "edit", "respond"]
OnTimeout = Literal["reject", "approve"]
STATUSES = ("pending", "approved", "rejected", "edited", "responded", "expired", "cancelled")
#: The status a decision leaves its approval in.
DECIDED: dict[str, str] = {"approve": "approved", "reject": "rejected", "edit": "edited",
                           "respond": "responded"}
MAX_TIMEOUT_S = 30 * 24 * 3600
DEFAULT_TIMEOUT_S = 86_400

REJECTED_OBSERVATION = (
    "Not run: a person reviewed this tool call and did not approve it. Do not call it again "
    "with the same arguments unless the user asks you to."
)
EXPIRED_OBSERVATION = (
    "Not run: this tool call needed a person's approval and nobody decided within {timeout} "
    "seconds, so it was not approved."
)


class ApprovalPolicy(BaseModel):
    """A run's ``approval`` field: which of its calls wait, for how long, and what expiry does.
    It adds to the tools' own ``requires_approval``; it never removes one."""

    model_config = ConfigDict(extra="forbid")

    tools: list[str] | Literal["all"] | None = None
    """Tools whose calls wait (``"all"``: every call); None: only the tools' own flags."""
    timeout_s: int | None = Field(None, ge=1, le=MAX_TIMEOUT_S)
    """Seconds a request waits; None = ``REACTQ_APPROVAL_TIMEOUT_S`` (86,400)."""
    on_timeout: OnTimeout = "reject"
    """What an expired request does to its call."""


def args_digest(args: Any) -> str:
    """Hex SHA-256 of ``args`` as canonical JSON (sorted keys, no spaces, UTF-8)."""
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def approval_id(run_id: str, call_id: str) -> str:
    """One id per call of a run (a redelivered request names the same approval)."""
    return "apr_" + hashlib.sha256(f"{run_id}\x00{call_id}".encode()).hexdigest()[:20]


def wait_reason(tool_name: str, tool_flag: bool, policy: dict[str, Any] | None) -> str | None:
    """Why a call must wait before any hook is asked (None: it need not)."""
    if tool_flag:
        return f"tool '{tool_name}' requires approval"
    tools = (policy or {}).get("tools")
    if tools == "all" or (isinstance(tools, list) and tool_name in tools):
        return f"the run's approval policy names '{tool_name}'"
    return None


def terms(*, tool_flag: bool, added_by_run: bool, policy: dict[str, Any] | None,
          operator_timeout_s: int, tool_on_timeout: str = "reject") -> tuple[int, str]:
    """``(timeout_s, on_timeout)`` of a call's approval.

    The run's ``approval`` field sets them only for the waits it adds (``added_by_run``: the
    policy named a tool that does not demand approval itself). A wait the tool demands, an MCP
    server's policy (its tools' ``requires_approval``) or a PreToolUse hook's ``ask`` follows
    the operator's: ``REACTQ_APPROVAL_TIMEOUT_S`` and ``reject``, unless the tool itself
    declares ``approval_on_timeout="approve"``. No request field skips a decision the tool
    demands."""
    if added_by_run and not tool_flag:
        p = policy or {}
        return int(p.get("timeout_s") or operator_timeout_s), str(p.get("on_timeout") or "reject")
    return operator_timeout_s, "approve" if tool_on_timeout == "approve" else "reject"


def request_record(*, run_id: str, call_id: str, tool_name: str, tool_args: dict[str, Any],
                   reason: str, requested_at: float, timeout_s: int, on_timeout: str,
                   tenant: str) -> dict[str, Any]:
    """A new, pending approval (what the lists and the request event show)."""
    return {
        "approval_id": approval_id(run_id, call_id), "run_id": run_id, "tool_call_id": call_id,
        "tool_name": tool_name, "tool_args": tool_args, "args_digest": args_digest(tool_args),
        "reason": reason, "requested_at": requested_at, "expires_at": requested_at + timeout_s,
        "timeout_s": timeout_s, "on_timeout": on_timeout, "status": "pending", "tenant": tenant,
    }


def requested_event(record: dict[str, Any]) -> dict[str, Any]:
    """The ``approval`` event's payload for a request (its ``seq`` is added when published)."""
    keys = ("approval_id", "tool_call_id", "tool_name", "tool_args", "args_digest", "reason", "expires_at")
    return {"status": "requested", **{k: record[k] for k in keys}}


def decided_record(record: dict[str, Any], status: str, *, decided_at: float, by: str | None,
                   args: dict[str, Any] | None = None, message: str | None = None) -> dict[str, Any]:
    """``record`` once decided (``status``: approved, edited, rejected, responded, expired,
    cancelled)."""
    out = {**record, "status": status, "decided_at": decided_at, "decided_by": by}
    if args is not None:
        out["approved_args"] = args
    if message is not None:
        out["message"] = message
    return out


def decided_event(record: dict[str, Any]) -> dict[str, Any]:
    data = {"status": record["status"], "approval_id": record["approval_id"],
            "tool_call_id": record["tool_call_id"], "decided_by": record.get("decided_by")}
    if "approved_args" in record:
        data["approved_args"] = record["approved_args"]
    return data


def effect(decision: str, on_timeout: str) -> str:
    """What a decision (or expiry: ``"expire"``) does: ``run`` the call or ``answer`` it."""
    if decision == "expire":
        return "run" if on_timeout == "approve" else "answer"
    return "run" if decision in ("approve", "edit") else "answer"


def answer_outcome(record: dict[str, Any], decision: str, message: str | None, now: float) -> ToolOutcome:
    """The outcome of a call that is not run: rejected, answered by a person, or expired."""
    if decision == "respond":
        text = message or ""
    elif decision == "expire":
        text = EXPIRED_OBSERVATION.format(timeout=record.get("timeout_s"))
    else:
        text = REJECTED_OBSERVATION + (f" Their message: {message}" if message else "")
    status = "expired" if decision == "expire" else DECIDED[decision]
    return ToolOutcome(tool_call_id=record["tool_call_id"], tool_name=record["tool_name"],
                       observation=text, started_at=now, ended_at=now, approval=status)
