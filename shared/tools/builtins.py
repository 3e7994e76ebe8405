"""Built-in tools: small, safe, deterministic helpers every deployment has.

=================  ==========================================================
``calculator``     arithmetic, parsed with :mod:`ast` (never ``eval``)
``current_time``   the current time in an IANA time zone, ISO-8601
``json_query``     pick a value out of a JSON document by a ``a.b[0].c`` path
``text_stats``     characters, words, lines and sentences of a text
``echo``           returns its input (the SPEC's ``EchoTool`` fixture)
``add``            the sum of two numbers (used by tests and the scripted demo)
``sleep``          waits up to 30 s (for demos and tests of parallel tool calls)
``http_fetch``     GET/HEAD of a public URL as readable text, SSRF-guarded
                   (:mod:`reactq.shared.tools.http_fetch`)
=================  ==========================================================

Errors are raised as :class:`~reactq.shared.errors.ToolError` with a message written for the
LLM (the engine turns it into an error observation); bad arguments never reach the
function, because :meth:`Tool.invoke` validates them against the pydantic model first.

Number formatting (``calculator`` and ``add``): integers stay exact (``17*23`` → ``391``,
``2**100`` → all 31 digits). Floats are printed with 15 significant digits
(``format(x, ".15g")``), which drops binary noise (``0.1+0.2`` → ``0.3``) and prints
integral floats without a trailing ``.0`` (``6/3`` → ``2``); very large or small floats
use exponent notation (``1e+20``). ``-0.0`` prints as ``0``.
"""

from __future__ import annotations

import ast
import asyncio
import difflib
import json
import math
import operator
import re
import zoneinfo
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from reactq.shared.errors import ToolError
from reactq.shared.tools.base import Tool, ToolRegistry
from reactq.shared.tools.http_fetch import http_fetch_tool

__all__ = [
    "BUILTIN_TOOLS",
    "add",
    "builtin_registry",
    "calculator",
    "current_time",
    "echo",
    "evaluate",
    "format_number",
    "http_fetch",
    "json_query",
    "sleep",
    "text_stats",
]

# --------------------------------------------------------------------------- numbers

MAX_EXPRESSION_CHARS = 500
"""Longest expression ``calculator`` accepts."""
MAX_EXPONENT = 1000
"""Largest ``|exponent|`` of ``**``."""
MAX_INT_DIGITS = 1000
"""Integer results (and intermediate values) must stay below ``10**MAX_INT_DIGITS``."""

_MAX_INT = 10**MAX_INT_DIGITS
# 10**1000 needs 3322 bits; a power whose lower bound exceeds this is refused unevaluated.
_MAX_INT_BITS = _MAX_INT.bit_length()

Number = int | float


def format_number(value: Number) -> str:
    """Integers exactly; floats with 15 significant digits, no trailing ``.0``."""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if value == 0:
        return "0"  # also normalises -0.0
    return format(value, ".15g")


# --------------------------------------------------------------------------- calculator


class CalculatorArgs(BaseModel):
    expression: str = Field(
        description=(
            "An arithmetic expression, e.g. '17*23', '(2+3)**2 / 7', 'sqrt(2) * pi'. "
            "Operators: + - * / // % ** and parentheses. Functions: sqrt, sin, cos, tan, "
            "log (natural, or log(x, base)), log10, exp, abs, round, min, max, floor, "
            "ceil. Constants: pi, e."
        ),
        min_length=1,
        max_length=MAX_EXPRESSION_CHARS,
    )


def _pow(base: Number, exponent: Number) -> Number:
    if abs(exponent) > MAX_EXPONENT:
        raise ToolError(f"Exponent too large: |{format_number(exponent)}| > {MAX_EXPONENT}")
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0:
        # The result has at least (bits(base) - 1) * exponent bits: refuse before computing.
        if (abs(base).bit_length() - 1) * exponent > _MAX_INT_BITS:
            raise ToolError(f"Result too large: more than {MAX_INT_DIGITS} digits")
    result: object = operator.pow(base, exponent)
    if not isinstance(result, int | float):  # a negative base to a fractional power
        raise ToolError("Result is not a real number (fractional power of a negative number)")
    return result


_BINARY_OPS: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: _pow,
}
_UNARY_OPS: dict[type[ast.unaryop], Callable[[Number], Number]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCTIONS: dict[str, Callable[..., Number]] = {
    "sqrt": math.sqrt,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "log": math.log,
    "log10": math.log10,
    "exp": math.exp,
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "floor": math.floor,
    "ceil": math.ceil,
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}

_NODE_NAMES: dict[type[ast.AST], str] = {
    ast.Attribute: "attribute access",
    ast.Subscript: "subscripts",
    ast.Lambda: "lambdas",
    ast.Compare: "comparisons",
    ast.BoolOp: "boolean operators",
    ast.IfExp: "conditional expressions",
    ast.List: "lists",
    ast.Tuple: "tuples",
    ast.Dict: "dicts",
    ast.Set: "sets",
    ast.JoinedStr: "f-strings",
    ast.NamedExpr: "assignments",
    ast.Starred: "starred arguments",
}


def _check_magnitude(value: Number) -> Number:
    if isinstance(value, int):
        if abs(value) >= _MAX_INT:
            raise ToolError(f"Result too large: more than {MAX_INT_DIGITS} digits")
    elif not math.isfinite(value):
        raise ToolError("Result is not a finite number (overflow)")
    return value


def _eval_node(node: ast.AST) -> Number:
    if isinstance(node, ast.Expression):
        return _eval_node(node.body)
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ToolError(f"Unsupported constant {value!r}: only numbers are allowed")
        return _check_magnitude(value)
    if isinstance(node, ast.BinOp):
        bin_op = _BINARY_OPS.get(type(node.op))
        if bin_op is None:
            raise ToolError(f"Unsupported operator: {type(node.op).__name__}")
        return _check_magnitude(bin_op(_eval_node(node.left), _eval_node(node.right)))
    if isinstance(node, ast.UnaryOp):
        unary_op = _UNARY_OPS.get(type(node.op))
        if unary_op is None:
            raise ToolError(f"Unsupported operator: {type(node.op).__name__}")
        return unary_op(_eval_node(node.operand))
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        if node.id in _FUNCTIONS:
            raise ToolError(f"'{node.id}' is a function: call it, e.g. {node.id}(2)")
        raise ToolError(f"Unknown name '{node.id}'. Allowed constants: {sorted(_CONSTANTS)}")
    if isinstance(node, ast.Call):
        return _eval_call(node)
    what = _NODE_NAMES.get(type(node), type(node).__name__)
    raise ToolError(f"Unsupported expression: {what} not allowed")


def _eval_call(node: ast.Call) -> Number:
    if not isinstance(node.func, ast.Name):
        _eval_node(node.func)  # names the real problem, e.g. attribute access
        raise ToolError("Unsupported expression: only calls of the allowed functions by name")
    name = node.func.id
    fn = _FUNCTIONS.get(name)
    if fn is None:
        raise ToolError(f"Unknown function '{name}'. Allowed functions: {sorted(_FUNCTIONS)}")
    if node.keywords:
        raise ToolError(f"{name}() takes positional arguments only")
    args = [_eval_node(a) for a in node.args]
    try:
        return _check_magnitude(fn(*args))
    except ToolError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        shown = ", ".join(format_number(a) for a in args)
        raise ToolError(f"{name}({shown}) failed: {exc}") from None


def evaluate(expression: str) -> Number:
    """Evaluate an arithmetic expression safely (the ``calculator`` tool's core)."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"Expression too long: {len(expression)} > {MAX_EXPRESSION_CHARS} chars")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"Invalid expression: {exc.msg}") from None
    except (ValueError, MemoryError, RecursionError) as exc:
        raise ToolError(f"Invalid expression: {exc}") from None
    try:
        return _eval_node(tree)
    except ZeroDivisionError:
        raise ToolError("Division by zero") from None
    except OverflowError:
        raise ToolError("Result is not a finite number (overflow)") from None
    except RecursionError:
        raise ToolError("Expression too deeply nested") from None


def _calculator(expression: str) -> str:
    return format_number(evaluate(expression))


calculator = Tool(
    name="calculator",
    inline=True,
    description=(
        "Evaluate an arithmetic expression and return the number (integers stay exact). "
        "Supports + - * / "
        "// % ** and parentheses, the functions sqrt, sin, cos, tan, log, log10, exp, abs, "
        "round, min, max, floor, ceil, and the constants pi and e."
    ),
    args_model=CalculatorArgs,
    fn=_calculator,
)

# --------------------------------------------------------------------------- current_time


class CurrentTimeArgs(BaseModel):
    timezone: str = Field(
        "UTC",
        description="An IANA time zone name, e.g. 'UTC', 'Europe/Paris', 'America/New_York'.",
        max_length=64,
    )


def _zone(name: str) -> zoneinfo.ZoneInfo:
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        pass
    available = zoneinfo.available_timezones()
    by_lower = {z.lower(): z for z in available}
    if name.lower() in by_lower:
        return zoneinfo.ZoneInfo(by_lower[name.lower()])
    close = difflib.get_close_matches(name, sorted(available), n=3)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise ToolError(
        f"Unknown timezone '{name}'. Use an IANA name such as 'UTC' or 'Europe/Paris'.{hint}"
    )


def _current_time(timezone: str = "UTC") -> str:
    return datetime.now(_zone(timezone.strip())).isoformat(timespec="seconds")


current_time = Tool(
    name="current_time",
    description="Return the current date and time (ISO-8601, with UTC offset) in a time zone.",
    args_model=CurrentTimeArgs,
    fn=_current_time,
)

# --------------------------------------------------------------------------- json_query


class JsonQueryArgs(BaseModel):
    data: str = Field(description="A JSON document, as text.")
    path: str = Field(
        description=(
            "Where the value is: keys separated by dots, list indexes in brackets, e.g. "
            "'a.b[0].c', 'items[-1]', 'a[\"key.with.dots\"]'. Empty = the whole document."
        ),
    )


_PATH_TOKEN = re.compile(
    r"""
    \.?(?P<key>[^.\[\]"']+)            # a bare key, optionally after a dot
    | \[\s*(?P<index>-?\d+)\s*\]        # [0], [-1]
    | \[\s*"(?P<dq>(?:[^"\\]|\\.)*)"\s*\]  # ["quoted key"]
    | \[\s*'(?P<sq>(?:[^'\\]|\\.)*)'\s*\]  # ['quoted key']
    """,
    re.VERBOSE,
)


def _parse_path(path: str) -> list[str | int]:
    """``a.b[0]["x.y"]`` → ``["a", "b", 0, "x.y"]``; a leading ``$`` is ignored."""
    text = path.strip()
    if text.startswith("$"):
        text = text[1:]
    steps: list[str | int] = []
    pos = 0
    while pos < len(text):
        m = _PATH_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ToolError(f"Invalid path '{path}' at position {pos}: {text[pos:pos + 10]!r}")
        if m.group("index") is not None:
            steps.append(int(m.group("index")))
        else:
            key = m.group("key")
            if key is None:
                quoted = m.group("dq") if m.group("dq") is not None else m.group("sq")
                key = re.sub(r"\\(.)", r"\1", quoted or "")
            steps.append(key)
        pos = m.end()
    return steps


def _describe(path: list[str | int]) -> str:
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return out or "(root)"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a string" if isinstance(value, str) else "a number"


def _json_query(data: str, path: str) -> str:
    try:
        value: Any = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ToolError(f"Invalid JSON in 'data': {exc}") from None
    walked: list[str | int] = []
    for step in _parse_path(path):
        if isinstance(value, list):
            if isinstance(step, str) and re.fullmatch(r"-?\d+", step):
                step = int(step)  # `items.0` works like `items[0]`
            if not isinstance(step, int):
                raise ToolError(
                    f"Path '{path}' not found: {_describe(walked)} is a list; use an index like [0]"
                )
            if not -len(value) <= step < len(value):
                raise ToolError(
                    f"Path '{path}' not found: index {step} out of range at {_describe(walked)} "
                    f"(list of length {len(value)})"
                )
            value = value[step]
        elif isinstance(value, dict):
            key = str(step)
            if key not in value:
                keys = list(value)[:20]
                raise ToolError(
                    f"Path '{path}' not found: no key '{key}' at {_describe(walked)} "
                    f"(available keys: {keys})"
                )
            value = value[key]
        else:
            raise ToolError(
                f"Path '{path}' not found: {_describe(walked)} is {_json_type(value)}, "
                f"not an object or a list"
            )
        walked.append(step)
    return json.dumps(value, ensure_ascii=False)


json_query = Tool(
    name="json_query",
    inline=True,
    description=(
        "Extract a value from a JSON document by a path like 'a.b[0].c'; returns the value "
        "as JSON."
    ),
    args_model=JsonQueryArgs,
    fn=_json_query,
)

# --------------------------------------------------------------------------- text_stats


class TextStatsArgs(BaseModel):
    text: str = Field(description="The text to measure.")


_SENTENCE_END = re.compile(r"[.!?]+(?:\s+|$)")


def _text_stats(text: str) -> str:
    """Words are whitespace-separated; a sentence ends at ``.``/``!``/``?`` + space or end."""
    stats = {
        "characters": len(text),
        "words": len(text.split()),
        "lines": len(text.splitlines()),
        "sentences": sum(1 for part in _SENTENCE_END.split(text) if part.strip()),
    }
    return json.dumps(stats)


text_stats = Tool(
    name="text_stats",
    inline=True,
    description=(
        "Count the characters, words, lines and sentences of a text; returns JSON "
        '{"characters", "words", "lines", "sentences"}.'
    ),
    args_model=TextStatsArgs,
    fn=_text_stats,
)

# --------------------------------------------------------------------------- echo, add, sleep


class EchoArgs(BaseModel):
    text: str = Field(description="The text to echo back.")


def _echo(text: str) -> str:
    return text


echo = Tool(
    name="echo",
    inline=True,
    description="Echoes the input text back.",
    args_model=EchoArgs,
    fn=_echo,
)


class AddArgs(BaseModel):
    a: int | float = Field(description="The first number.")
    b: int | float = Field(description="The second number.")


def _add(a: Number, b: Number) -> str:
    return format_number(a + b)


add = Tool(
    name="add",
    inline=True,
    description="Add two numbers and return the sum.",
    args_model=AddArgs,
    fn=_add,
)

MAX_SLEEP_SECONDS = 30.0


class SleepArgs(BaseModel):
    seconds: float = Field(
        description=f"How long to wait, 0 to {MAX_SLEEP_SECONDS:g} seconds.",
        ge=0,
        le=MAX_SLEEP_SECONDS,
    )


async def _sleep(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return f"slept {seconds:g}s"


sleep = Tool(
    name="sleep",
    description="Wait for a number of seconds (0-30), then say so. For demos and tests.",
    args_model=SleepArgs,
    fn=_sleep,
    metadata={"testing": True},
)

# --------------------------------------------------------------------------- registry

http_fetch = http_fetch_tool()
"""``http_fetch`` with the default limits and no allowlist; workers build theirs from
``Settings`` (``REACTQ_HTTP_FETCH_*``) in :func:`reactq.shared.tools.loader.default_registry`."""

BUILTIN_TOOLS: list[Tool] = [calculator, current_time, json_query, text_stats, echo, add, sleep,
                             http_fetch]
"""Every built-in tool, in the order ``builtin_registry()`` registers them."""


def builtin_registry() -> ToolRegistry:
    """A new registry holding every built-in tool."""
    return ToolRegistry(BUILTIN_TOOLS)
