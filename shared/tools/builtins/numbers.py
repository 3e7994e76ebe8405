"""``calculator``: arithmetic parsed with :mod:`ast` (never ``eval``), bounded so that no
expression within its limits burns more than ~100 ms of CPU; and the shared number format."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

from pydantic import BaseModel, Field
from reactq.shared.errors import ToolError
from reactq.shared.tools.base import Tool

# --------------------------------------------------------------------------- numbers

MAX_EXPRESSION_CHARS = 500
"""Longest expression ``calculator`` accepts."""
MAX_EXPONENT = 1000
"""Largest ``|exponent|`` of ``**``."""
MAX_INT_DIGITS = 1000
"""Integer results (and intermediate values) must stay below ``10**MAX_INT_DIGITS``."""
MAX_ROUND_DIGITS = 400
"""Largest ``|ndigits|`` of ``round``: ``round(1, -10**8)`` would compute ``10**(10**8)``."""
MAX_FUNCTION_ARGS = 100
"""Most arguments of one function call (``min``/``max``)."""
MAX_DOCUMENT_CHARS = 200_000
"""Longest ``json_query`` document and ``text_stats`` text."""

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


def _check_call(name: str, args: list[Number]) -> None:
    """Refuse arguments whose cost grows with their value (before computing anything)."""
    if len(args) > MAX_FUNCTION_ARGS:
        raise ToolError(f"{name}() takes at most {MAX_FUNCTION_ARGS} arguments")
    if name == "round" and len(args) == 2:
        ndigits = args[1]
        if isinstance(ndigits, int) and abs(ndigits) > MAX_ROUND_DIGITS:
            raise ToolError(f"round(): |ndigits| must be at most {MAX_ROUND_DIGITS}")

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
    _check_call(name, args)
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
    isolate=False,
    description=(
        "Evaluate an arithmetic expression and return the number (integers stay exact). "
        "Supports + - * / "
        "// % ** and parentheses, the functions sqrt, sin, cos, tan, log, log10, exp, abs, "
        "round, min, max, floor, ceil, and the constants pi and e."
    ),
    args_model=CalculatorArgs,
    fn=_calculator,
)
