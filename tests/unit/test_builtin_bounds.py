"""Issue 10, item 2: no built-in tool can be made to burn more than ~100 ms of CPU by any
argument within its limits. Each case is a known or likely "poison pill"; it must be refused
or answered within the budget: CPU time of this thread, with the garbage collector held off
(a collection costs what the whole test process holds, not what the tool does), the best of up
to three tries (a loaded or virtualised box adds time to a try now and then; a poison pill
burns on every try).

``round(1, -10**8)`` (16 characters) used to compute ``10**(10**8)``: minutes of CPU.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from reactq.shared.errors import ToolError
from reactq.shared.tools.base import ToolArgumentsError
from reactq.shared.tools.builtins import (
    MAX_DOCUMENT_CHARS,
    MAX_ROUND_DIGITS,
    calculator,
    current_time,
    evaluate,
    json_query,
    text_stats,
)

BUDGET_S = 0.1
N = MAX_DOCUMENT_CHARS


TRIES = 3


def _once(fn: Callable[[], Any]) -> float:
    gc.disable()
    started = time.thread_time()
    try:
        fn()
    except ToolError:
        pass
    finally:
        took = time.thread_time() - started
        gc.enable()
    return took


def cpu(fn: Callable[[], Any]) -> float:
    """CPU seconds ``fn`` took in this thread (the best of up to ``TRIES`` tries: one under the
    budget settles it); a ToolError counts as a (fast) refusal."""
    best = _once(fn)
    for _ in range(TRIES - 1):
        if best < BUDGET_S:
            break
        best = min(best, _once(fn))
    return best


def test_the_measure_catches_a_call_that_burns_past_the_budget() -> None:
    def burn() -> None:
        started = time.thread_time()
        while time.thread_time() - started < 1.5 * BUDGET_S:
            pass

    assert cpu(burn) >= 1.5 * BUDGET_S
    assert cpu(lambda: None) < BUDGET_S


CALCULATOR = [
    "round(1, -10**8)", "round(10**999, -10**6)", "round(1.5, 10**8)", "round(2, -99999999) + 1",
    f"round(10**999, -{MAX_ROUND_DIGITS})", f"round(10**999, {MAX_ROUND_DIGITS})",
    "9**999 * 9**999", "2**1000 * 2**1000 * 2**1000", "10**10**10", "(10**999)**1000",
    "floor(1e308)**3", "10**999 // 3 % 7 + 10**999 % 10**998", "exp(1000)", "sqrt(10**999)",
    "log(10**999, 10**999)", "1e308 * 1e308", "max(" + ",".join(["9**999"] * 70) + ")",
    "(" * 200 + "1" + ")" * 200, "-" * 499 + "1", "2**-1000", "(-8)**(1/3)",
    "round(" * 35 + "1" + ", -400)" * 35,
]


@pytest.mark.parametrize("expression", CALCULATOR)
def test_calculator_poison_pills_are_cheap(expression: str) -> None:
    assert len(expression) <= 500
    assert cpu(lambda: evaluate(expression)) < BUDGET_S


def test_round_refuses_huge_ndigits_by_name() -> None:
    with pytest.raises(ToolError, match="ndigits"):
        evaluate("round(1, -10**8)")
    assert evaluate(f"round(123456, -{MAX_ROUND_DIGITS})") == 0
    assert evaluate("round(2.675, 2)") == 2.67


def test_calculator_refuses_too_many_arguments() -> None:
    with pytest.raises(ToolError, match="at most 100 arguments"):
        evaluate("max(" + ",".join(["1"] * 101) + ")")


DOCUMENTS: list[tuple[str, str]] = [
    ("[" * N, ""),
    ("{\"a\":" * (N // 5), "a"),
    (json.dumps(list(range(N // 7))), "[-1]"),
    ("[" + ",".join(["9" * 4000] * (N // 4001 - 1)) + "]", ""),
    ("[" + ",".join(["1" * 5000] * 3) + "]", ""),
    (json.dumps({f"k{i}": i for i in range(N // 16)}), "missing.key"),
    (json.dumps({"a": "x" * (N - 20)}), "a"),
    ('"' + "\\u00e9" * (N // 6 - 1) + '"', ""),
]


@pytest.mark.parametrize("data,path", DOCUMENTS, ids=lambda v: str(v)[:20])
def test_json_query_worst_documents_are_cheap(data: str, path: str) -> None:
    assert len(data) <= N
    assert cpu(lambda: json_query.fn(data, path)) < BUDGET_S


def test_json_query_worst_paths_are_cheap() -> None:
    doc = json.dumps({"a": {"a": {"a": 1}}})
    for path in ["a." * 499, "[0]" * 333, '["' + "\\\\" * 495 + '"]', "a" * 1000, "$" + "." * 999]:
        assert cpu(lambda path=path: json_query.fn(doc, path)) < BUDGET_S


TEXTS = [
    "." * N, "." * (N - 1) + "x", "!?" * (N // 2), "a " * (N // 2), "\n" * N, ". " * (N // 2),
    "x" * N, ("word. " * (N // 6)),
]


@pytest.mark.parametrize("text", TEXTS, ids=lambda t: repr(t[:6]))
def test_text_stats_worst_texts_are_cheap(text: str) -> None:
    assert cpu(lambda: text_stats.fn(text)) < BUDGET_S


def test_text_stats_counts_a_run_of_marks_as_one_sentence_end() -> None:
    assert json.loads(text_stats.fn("Hi!!! Are you there?? Yes..."))["sentences"] == 3


@pytest.mark.parametrize("zone", ["x" * 64, "Europe/" + "a" * 57, "../../../../etc/passwd", "utc"])
def test_current_time_worst_zones_are_cheap(zone: str) -> None:
    current_time.fn("UTC")  # the zone list is read once per process, not per call
    assert cpu(lambda: current_time.fn(zone)) < BUDGET_S


@pytest.mark.parametrize("tool,args", [
    (json_query, {"data": "[" * (N + 1), "path": ""}),
    (json_query, {"data": "[]", "path": "a" * 1001}),
    (text_stats, {"text": "." * (N + 1)}),
    (calculator, {"expression": "1+" * 250 + "1"}),
])
async def test_inputs_past_the_limits_are_refused_naming_the_field(tool: Any, args: dict[str, Any]) -> None:
    with pytest.raises(ToolArgumentsError, match=next(iter(a for a in args if len(str(args[a])) > 500))):
        await tool.invoke(args)


def test_every_builtin_is_bounded_so_it_runs_in_the_worker() -> None:
    from reactq.shared.tools.builtins import BUILTIN_TOOLS, DEMO_TOOLS

    assert all(not t.isolate for t in BUILTIN_TOOLS + DEMO_TOOLS)
