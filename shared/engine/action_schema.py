"""The JSON-mode action (the two shapes) as a JSON schema, for servers that constrain a reply
to one (``abilities.json_schema``: llama.cpp's grammars, vLLM's guided decoding).

One alternative per tool of the run — ``{"type": "tool_call", "tool_name": <that tool>,
"tool_args": <its parameter schema>}`` — and ``{"type": "final_answer", "answer": "..."}``;
``answer_only`` keeps the last one alone (``max_tool_turns`` reached). So a constrained model
can neither invent a tool name nor send arguments of the wrong shape.

What the schema leaves out, and why (measured with the bundled SmolLM2-135M):

* ``reasoning``: a small model writes its guess there before the call ("17 * 23 = 4096") and
  then follows the guess; with the field, 5 of 15 sample answers were right, without, 12
  (in-process, 3 runs of the demo's 5 questions, graded by the earlier, looser patterns).
  The parser reads a missing ``reasoning`` as "".
* length bounds (``maxLength``, ``maxItems``): llama.cpp unrolls ``maxLength`` into nested
  optional groups, and ``text_stats``' 200,000 made a 1.6 MB grammar that overflowed the
  server's stack (a segfault). The tools still check their own bounds, and the request's
  ``max_tokens`` bounds the reply.
* ``$ref``: a tool's ``$defs`` are inlined, because a reference inside an ``anyOf``
  alternative would be resolved against the action schema's root.
"""

from __future__ import annotations

from typing import Any

__all__ = ["action_schema", "response_format"]

_DROPPED = frozenset({"maxLength", "maxItems", "$defs", "definitions", "title"})
_DATA = frozenset({"enum", "const", "default", "examples"})
_MAX_DEPTH = 32
_FINAL: dict[str, Any] = {
    "type": "object",
    "properties": {"type": {"const": "final_answer"}, "answer": {"type": "string"}},
    "required": ["type", "answer"],
}


def action_schema(tools: list[dict[str, Any]], *, answer_only: bool = False) -> dict[str, Any]:
    """The schema of one JSON-mode reply; ``tools`` are OpenAI tool schemas."""
    alternatives = [] if answer_only else [_tool_call(t["function"]) for t in tools]
    alternatives.append(_FINAL)
    return alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}


def response_format(tools: list[dict[str, Any]], *, answer_only: bool = False) -> dict[str, Any]:
    """OpenAI's ``response_format`` for :func:`action_schema` (the adapter reshapes it for
    servers that take the schema another way: ``json_schema_as`` in the model registry)."""
    return {"type": "json_schema",
            "json_schema": {"name": "react_action", "schema": action_schema(tools, answer_only=answer_only)}}


def _tool_call(fn: dict[str, Any]) -> dict[str, Any]:
    params = fn.get("parameters") or {"type": "object"}
    args = _plain(params, params.get("$defs") or params.get("definitions") or {}, 0)
    return {
        "type": "object",
        "properties": {"type": {"const": "tool_call"}, "tool_name": {"const": fn["name"]},
                       "tool_args": args},
        "required": ["type", "tool_name", "tool_args"],
    }


def _plain(node: Any, defs: dict[str, Any], depth: int) -> Any:
    """``node`` with references inlined and length bounds dropped (a recursive or unknown
    reference becomes "any object": the tool validates what it receives anyway)."""
    if isinstance(node, list):
        return [_plain(v, defs, depth) for v in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = defs.get(ref.rsplit("/", 1)[-1])
        if target is None or depth >= _MAX_DEPTH:
            return {"type": "object"}
        return _plain(target, defs, depth + 1)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("properties", "patternProperties"):  # names, not keywords: keep them all
            out[key] = {name: _plain(sub, defs, depth) for name, sub in value.items()}
        elif key in _DATA:  # values, not schemas
            out[key] = value
        elif key not in _DROPPED:
            out[key] = _plain(value, defs, depth)
    return out
