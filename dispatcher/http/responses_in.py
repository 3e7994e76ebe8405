"""The body of ``POST /v1/responses`` and how it becomes a reactq run request.

``model`` is a registry name; ``input`` a string, or message items (role ``user``, ``system``
or ``developer``; text content) — or ``mcp_approval_response`` items, which decide the pending
approvals of ``previous_response_id`` instead of making a run. ``instructions`` and system /
developer messages become the run's ``system_prompt``; ``tools`` (``{type: "function", name}``)
name registered reactq tools; ``text.format`` (``json_schema``) is the run's ``output_schema``;
``previous_response_id`` continues that response's thread; ``max_output_tokens`` is the run's
``token_budget`` (reactq caps a run's tokens, prompt and completion, not one answer's).
Fields of the OpenAI API that reactq has no use for (``temperature``, ``store``, …) are ignored.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from reactq.shared.errors import RequestError

__all__ = ["ApprovalAnswer", "ResponseCreate", "approval_answers", "run_request"]

#: The thread a response's run starts (each response has one, so that a later
#: ``previous_response_id`` can continue it).
THREAD_PREFIX = "responses."


class ResponseCreate(BaseModel):
    """``POST /v1/responses``."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = Field(None, max_length=200)
    input: str | list[dict[str, Any]] = Field(..., description="a string, or message / mcp_approval_response items")
    instructions: str | None = Field(None, max_length=100_000)
    tools: list[dict[str, Any]] | None = None
    background: bool = False
    stream: bool = False
    metadata: dict[str, str] | None = None
    previous_response_id: str | None = Field(None, max_length=140)
    text: dict[str, Any] | None = None
    max_output_tokens: int | None = Field(None, ge=1)


class ApprovalAnswer(BaseModel):
    """One ``mcp_approval_response`` input item."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["mcp_approval_response"]
    approval_request_id: str = Field(..., min_length=1, max_length=200)
    approve: bool
    reason: str | None = Field(None, max_length=10_000)


def approval_answers(body: ResponseCreate) -> list[ApprovalAnswer]:
    """The ``mcp_approval_response`` items of ``input`` (none: the body makes a run)."""
    if isinstance(body.input, str):
        return []
    answers = [i for i in body.input if i.get("type") == "mcp_approval_response"]
    if answers and len(answers) != len(body.input):
        raise RequestError("input: mcp_approval_response items cannot be mixed with messages", field="input")
    if answers and body.previous_response_id is None:
        raise RequestError("previous_response_id: an mcp_approval_response answers that response's request",
                           field="previous_response_id")
    return [ApprovalAnswer.model_validate(a) for a in answers]


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in ("input_text", "output_text", "text"):
                raise RequestError(f"{where}[{i}]: only text content is accepted", field=f"{where}[{i}].type")
            parts.append(str(part.get("text") or ""))
        return "\n".join(parts)
    raise RequestError(f"{where}: a string or a list of text parts", field=where)


def _messages(body: ResponseCreate) -> tuple[str, list[str]]:
    """(the query, system texts) of ``input``."""
    if isinstance(body.input, str):
        return body.input, []
    user: list[str] = []
    system: list[str] = []
    for i, item in enumerate(body.input):
        role = item.get("role")
        if item.get("type", "message") != "message" or role not in ("user", "system", "developer"):
            raise RequestError(f"input[{i}]: a message with role user, system or developer",
                               field=f"input[{i}].role")
        (user if role == "user" else system).append(_text(item.get("content"), f"input[{i}].content"))
    return "\n\n".join(user), system


def _tools(body: ResponseCreate) -> list[str] | None:
    if body.tools is None:
        return None
    names = []
    for i, tool in enumerate(body.tools):
        if tool.get("type") != "function" or not isinstance(tool.get("name"), str):
            raise RequestError(f"tools[{i}]: reactq runs its own registered tools: {{type: 'function', name}}",
                               field=f"tools[{i}].type")
        names.append(tool["name"])
    return names


def _schema(body: ResponseCreate) -> tuple[dict[str, Any] | None, str | None]:
    fmt = (body.text or {}).get("format") or {"type": "text"}
    kind = fmt.get("type")
    if kind == "text":
        return None, None
    if kind == "json_object":
        return {"type": "object"}, "output"
    if kind == "json_schema" and isinstance(fmt.get("schema"), dict):
        return fmt["schema"], str(fmt.get("name") or "output")
    raise RequestError("text.format: type text, json_object, or json_schema with a schema", field="text.format")


def run_request(body: ResponseCreate, previous: dict[str, Any] | None) -> dict[str, Any]:
    """The run request (a dict for ``RunRequest``) of a body that makes a run; ``previous``
    is the stored request of ``previous_response_id``'s run."""
    query, system = _messages(body)
    schema, schema_name = _schema(body)
    prompt = "\n\n".join([body.instructions, *system] if body.instructions else system) or None
    meta: dict[str, Any] = dict(body.metadata or {})
    meta["responses.background"] = body.background
    if schema_name:
        meta["responses.format_name"] = schema_name
    thread = None
    if previous is not None:
        thread = previous.get("thread_id")
        meta["responses.previous"] = body.previous_response_id
    req: dict[str, Any] = {
        "query": query, "tools": _tools(body), "system_prompt": prompt, "metadata": meta,
        "output_schema": schema, "token_budget": body.max_output_tokens,
        "thread_id": thread or THREAD_PREFIX + uuid.uuid4().hex, "multitask_strategy": "enqueue",
    }
    if body.model is not None:
        req["model"] = body.model
    return {k: v for k, v in req.items() if v is not None}
