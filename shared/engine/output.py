"""Structured output: what a run's ``output_schema`` means, as pure functions.

* ``check_schema`` — the door's check: a JSON object, at most ``MAX_SCHEMA_BYTES`` as JSON, a
  valid JSON Schema (draft 2020-12, ``jsonschema``'s own ``check_schema``).
* ``call_schema`` — what is asked of the model. An object schema as it is; any other schema
  wrapped as ``{"value": <it>}`` (a forced function call's parameters, and OpenAI's
  ``json_schema`` response format, must be objects); ``unwrap`` undoes it.
* ``problems`` — the validator's errors as ``(path, message)`` pairs, in path order; the first
  one names a run that ends ``output_invalid``.
* ``repair_messages`` — what a repair attempt adds to the conversation: the model's JSON and
  the validator's errors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from reactq.shared.models import ChatMessage

__all__ = [
    "MAX_SCHEMA_BYTES",
    "Problem",
    "call_schema",
    "check_schema",
    "output_prompt",
    "output_text",
    "problems",
    "repair_messages",
    "unwrap",
]

MAX_SCHEMA_BYTES = 64 * 1024
"""The largest ``output_schema`` accepted, as compact JSON (UTF-8)."""
_WRAP_KEY = "value"
_SHOWN_PROBLEMS = 10
_SNIPPET = 120


@dataclass(frozen=True)
class Problem:
    """One way a value fails its schema: a JSON path (``$.items[0].price``), the validator's
    message (which may quote the value: only the model that wrote it sees it, in a repair
    request) and the rule it breaks, taken from the schema (``type: "integer"``).

    ``str()`` — what events, errors and results show — names the path and the rule, never
    the value: a value the model wrote is not published unchecked (an ``ANSWER`` guardrail
    such as the PII redactor has not seen it)."""

    path: str
    message: str
    rule: str = ""

    def __str__(self) -> str:
        return f"{self.path}: does not satisfy {self.rule or 'the schema'}"

    def detail(self) -> str:
        """The path and the validator's own message (for the model's repair request)."""
        return f"{self.path}: {self.message}"


def check_schema(schema: Any) -> dict[str, Any]:
    """``schema`` when it is an acceptable ``output_schema``; else ``ValueError`` saying why."""
    if not isinstance(schema, dict):
        raise ValueError(f"must be a JSON Schema object, got {type(schema).__name__}")
    size = len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_SCHEMA_BYTES:
        raise ValueError(f"is {size} bytes as JSON; the limit is {MAX_SCHEMA_BYTES} bytes")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = _json_path(exc.absolute_path)
        raise ValueError(f"is not a valid JSON Schema (draft 2020-12): at {where}: "
                         f"{_cut(exc.message)}") from None
    _check_refs(schema)
    return schema


def _check_refs(schema: dict[str, Any]) -> None:
    """Every ``$ref`` must resolve inside the schema: nothing is ever fetched, and a reference
    to nowhere is refused here rather than failing every answer."""
    resolver = Registry().with_resource("", DRAFT202012.create_resource(schema)).resolver()
    for ref in _refs(schema):
        try:
            resolver.lookup(ref)
        except Exception:  # noqa: BLE001 — referencing raises several kinds of Unresolvable
            raise ValueError(f"$ref {_cut(ref)!r} does not resolve inside the schema (references "
                             "to other documents are not supported)") from None


def _refs(node: Any) -> list[str]:
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    if not isinstance(node, dict):
        return []
    found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
    return found + [r for k, v in node.items() if k not in ("enum", "const", "default", "examples")
                    for r in _refs(v)]


def is_object_schema(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "object"


def call_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The object schema the model is asked to fill (see the module doc)."""
    if is_object_schema(schema):
        return schema
    inner = {k: v for k, v in schema.items() if k not in ("$defs", "$schema", "$id")}
    wrapper: dict[str, Any] = {"type": "object", "properties": {_WRAP_KEY: inner},
                               "required": [_WRAP_KEY], "additionalProperties": False}
    if "$defs" in schema:  # "#/$defs/x" references resolve against the root
        wrapper["$defs"] = schema["$defs"]
    return wrapper


def unwrap(schema: dict[str, Any], data: dict[str, Any]) -> tuple[Any, bool]:
    """``(value, True)`` from the data the model returned for ``call_schema(schema)``;
    ``(data, False)`` when a wrapped value is missing (the validator then says so)."""
    if is_object_schema(schema):
        return data, True
    if _WRAP_KEY in data:
        return data[_WRAP_KEY], True
    return data, False


def bare_value(text: str) -> dict[str, Any] | None:
    """A plain-text reply that is a bare JSON value (``42``, ``["a"]``, ``"yes"``), wrapped as
    ``{"value": …}``: the last-resort extraction for a wrapped schema."""
    try:
        value = json.loads(text.strip())
    except (ValueError, TypeError):
        return None
    return None if isinstance(value, dict) else {_WRAP_KEY: value}


def problems(schema: dict[str, Any], value: Any) -> list[Problem]:
    """Every way ``value`` fails ``schema`` (formats checked too), in path order."""
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    try:
        errors: list[ValidationError] = list(validator.iter_errors(value))
    except Exception as exc:  # noqa: BLE001 — a schema the door let through but cannot apply
        return [Problem("$", f"the schema could not be applied: {_cut(str(exc))}", "a schema that applies")]
    found = [Problem(_json_path(e.absolute_path), _cut(e.message), _rule(e)) for e in errors]
    return sorted(found, key=lambda p: (p.path, p.message))


def output_text(value: Any) -> str:
    """The answer's text: the value as JSON (non-ASCII kept)."""
    return json.dumps(value, ensure_ascii=False)


def output_prompt(schema: dict[str, Any]) -> str:
    """The instruction that follows the question and trace in an answer attempt."""
    wanted = call_schema(schema)
    return ("Reply with ONLY a JSON object that is valid against this JSON Schema — no prose, "
            "no markdown, no code fences:\n" + json.dumps(wanted, ensure_ascii=False))


def repair_messages(reply: str, found: list[Problem]) -> list[ChatMessage]:
    """The failed attempt and the validator's errors, for the next attempt to fix."""
    if found:
        listed = "\n".join(f"- {p.detail()}" for p in found[:_SHOWN_PROBLEMS])
        more = len(found) - _SHOWN_PROBLEMS
        if more > 0:
            listed += f"\n- … and {more} more"
        ask = ("That JSON is not valid against the required JSON Schema. The validator "
               f"reported:\n{listed}\nReply again with ONLY the corrected JSON object.")
    else:
        ask = "That reply was not a JSON object. Reply again with ONLY the JSON object."
    messages = [ChatMessage(role="assistant", content=reply)] if reply else []
    return [*messages, ChatMessage(role="user", content=ask)]


def _rule(error: ValidationError) -> str:
    """The schema's rule an error breaks, from the schema alone (``minimum: 0``, ``type:
    "integer"``; a rule whose value is a schema or a long list by its keyword only)."""
    keyword = str(error.validator)
    value = error.validator_value
    if keyword == "required" and isinstance(value, list) and isinstance(error.instance, dict):
        value = [k for k in value if k not in error.instance] or value  # the missing ones
        value = value[0] if len(value) == 1 else value
    if isinstance(value, (str, int, float, bool)) or (
            isinstance(value, list) and all(isinstance(v, (str, int, float, bool)) for v in value)):
        shown = json.dumps(value, ensure_ascii=False)
        if len(shown) <= 120:
            return f"{keyword}: {shown}"
    return keyword


def _json_path(path: Any) -> str:
    out = "$"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _cut(text: str) -> str:
    return text if len(text) <= _SNIPPET * 2 else text[:_SNIPPET * 2] + "…"
