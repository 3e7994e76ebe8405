"""Tools: the built-ins, ``Tool``/``ToolRegistry``/``@tool``, and the ``REACTQ_TOOLS`` loader.

SPEC references: §0 (the ``echo`` fixture), T-A4 (``add`` 1+2 → "3"), S4 (tools
payload), S33/S35 (registry order and filtering). The built-ins' own behaviour and the
``REACTQ_TOOLS`` loader are reactq decisions (DESIGN "Configuration"), labelled by tool.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from reactq.shared.errors import ConfigError, ToolError, ToolNotFound
from reactq.shared.models import ToolResult
from reactq.shared.settings import Settings
from reactq.shared.tools.base import Tool, ToolArgumentsError, ToolRegistry, tool
from reactq.shared.tools.builtins import (
    BUILTIN_TOOLS,
    add,
    builtin_registry,
    calculator,
    current_time,
    echo,
    json_query,
    sleep,
    text_stats,
)
from reactq.shared.tools.loader import default_registry, load_tools


async def calc(expression: str) -> str | ToolResult:
    return await calculator.invoke({"expression": expression})


# --------------------------------------------------------------------------- calculator


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("17*23", "391"),
        ("1 + 2 * 3", "7"),
        ("(1 + 2) * 3", "9"),
        ("2**100", "1267650600228229401496703205376"),
        ("7 / 2", "3.5"),
        ("6 / 3", "2"),
        ("7 // 2", "3"),
        ("-7 // 2", "-4"),
        ("7 % 3", "1"),
        ("2 ** -2", "0.25"),
        ("-(3)", "-3"),
        ("+4", "4"),
        ("--4", "4"),
        ("0.1 + 0.2", "0.3"),
        ("sqrt(16)", "4"),
        ("sqrt(2)", "1.4142135623731"),
        ("log(8, 2)", "3"),
        ("log10(1000)", "3"),
        ("exp(0)", "1"),
        ("abs(-5)", "5"),
        ("round(2.567, 2)", "2.57"),
        ("round(2.5)", "2"),
        ("min(3, 1, 2)", "1"),
        ("max(3, 1, 2)", "3"),
        ("floor(2.7) + ceil(2.1)", "5"),
        ("cos(0)", "1"),
        ("sin(0)", "0"),
        ("tan(0)", "0"),
        ("pi", "3.14159265358979"),
        ("e", "2.71828182845905"),
        ("-0.0", "0"),
        ("1e20", "1e+20"),
        ("  12  ", "12"),
    ],
)
async def test_calculator_evaluates_arithmetic_and_formats_numbers_without_noise(
    expression: str, expected: str
) -> None:
    """Built-in calculator: exact integers, 15-significant-digit floats, no trailing .0."""
    assert await calc(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os')", "Unknown function '__import__'"),
        ("__import__('os').system('true')", "attribute access not allowed"),
        ("().__class__", "attribute access not allowed"),
        ("(1).real", "attribute access not allowed"),
        ("os", "Unknown name 'os'"),
        ("open('x')", "Unknown function 'open'"),
        ("eval('1')", "Unknown function 'eval'"),
        ("'abc'", "only numbers are allowed"),
        ("True + 1", "only numbers are allowed"),
        ("1j", "only numbers are allowed"),
        ("[1, 2]", "lists not allowed"),
        ("(1, 2)", "tuples not allowed"),
        ("1 < 2", "comparisons not allowed"),
        ("1 if 1 else 2", "conditional expressions not allowed"),
        ("lambda: 1", "lambdas not allowed"),
        ("[x for x in (1,)]", "ListComp"),
        ("not 1", "Unsupported operator: Not"),
        ("1 & 3", "Unsupported operator: BitAnd"),
        ("1 << 3", "Unsupported operator: LShift"),
        ("sqrt", "'sqrt' is a function"),
        ("round(x=1)", "positional arguments only"),
        ("2 ** 1001", "Exponent too large"),
        ("9 ** 9 ** 9", "Exponent too large"),
        ("10 ** 1000", "Result too large"),
        ("(10 ** 999) * (10 ** 999)", "Result too large"),
        ("1e308 * 10", "not a finite number"),
        ("10 ** 999 * 1.5", "not a finite number"),
        ("exp(1000)", "exp(1000) failed"),
        ("sqrt(-1)", "sqrt(-1) failed: math domain error"),
        ("log(0)", "log(0) failed"),
        ("(-8) ** (1 / 3)", "not a real number"),
        ("1 / 0", "Division by zero"),
        ("1 % 0", "Division by zero"),
        ("0 ** -1", "Division by zero"),
        ("min()", "min() failed"),
        ("1 +", "Invalid expression"),
        ("x = 1", "Invalid expression"),
        ("(" * 240 + "1" + ")" * 240, "Invalid expression"),
        ("(1)(2)", "only calls of the allowed functions by name"),
    ],
)
async def test_calculator_refuses_unsafe_or_unbounded_expressions_with_a_clear_error(
    expression: str, message: str
) -> None:
    """Built-in calculator: parsed with ast, never eval; names, attributes and huge powers refused."""
    with pytest.raises(ToolError, match=_re(message)):
        await calc(expression)


def _re(text: str) -> str:
    import re

    return re.escape(text)


async def test_calculator_refuses_expressions_longer_than_500_characters() -> None:
    """Built-in calculator: the length limit is checked by the argument model (names the field)."""
    with pytest.raises(ToolArgumentsError, match="expression"):
        await calc("1+" * 250 + "1")


async def test_calculator_is_fast_even_for_the_largest_allowed_power() -> None:
    """Built-in calculator: the magnitude check happens before the power is computed."""
    start = time.perf_counter()
    with pytest.raises(ToolError):
        await calc("999999999999 ** 1000")
    assert await calc("2 ** 1000") == str(2**1000)
    assert time.perf_counter() - start < 1.0


# --------------------------------------------------------------------------- other built-ins


async def test_current_time_returns_iso_8601_in_the_requested_zone() -> None:
    """Built-in current_time: ISO-8601 with the zone's offset; UTC by default."""
    utc = datetime.fromisoformat(str(await current_time.invoke({})))
    assert utc.utcoffset() == timedelta(0)
    assert abs((datetime.now(utc.tzinfo) - utc).total_seconds()) < 5
    tokyo = datetime.fromisoformat(str(await current_time.invoke({"timezone": "Asia/Tokyo"})))
    assert tokyo.utcoffset() == timedelta(hours=9)


async def test_current_time_accepts_a_zone_name_in_the_wrong_case() -> None:
    """Built-in current_time: 'europe/paris' is understood as 'Europe/Paris'."""
    out = str(await current_time.invoke({"timezone": "europe/paris"}))
    assert out.endswith(("+01:00", "+02:00"))


@pytest.mark.parametrize("zone", ["Mars/Olympus", "../etc/passwd", "", "Europe/Pariss"])
async def test_current_time_refuses_an_unknown_zone_clearly(zone: str) -> None:
    """Built-in current_time: an unknown zone is a ToolError naming it."""
    with pytest.raises(ToolError, match=f"Unknown timezone '{_re(zone)}'"):
        await current_time.invoke({"timezone": zone})


async def test_current_time_suggests_close_zone_names() -> None:
    """Built-in current_time: a misspelt zone gets a 'Did you mean' hint."""
    with pytest.raises(ToolError, match="Did you mean: Europe/Paris"):
        await current_time.invoke({"timezone": "Europe/Pariss"})


DOC = json.dumps({"a": {"b": [{"c": 1}, {"c": [2, 3]}]}, "x.y": {"z": "ü"}, "n": None})


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("a.b[0].c", 1),
        ("a.b[1].c", [2, 3]),
        ("a.b[-1].c[0]", 2),
        ("a.b.1.c", [2, 3]),
        ('["x.y"].z', "ü"),
        ("['x.y'].z", "ü"),
        ("$.a.b[0]", {"c": 1}),
        ("n", None),
        ("", json.loads(DOC)),
    ],
)
async def test_json_query_returns_the_value_at_a_dotted_bracket_path_as_json(
    path: str, expected: object
) -> None:
    """Built-in json_query: `a.b[0].c` paths, quoted keys, negative indexes; returns JSON."""
    out = str(await json_query.invoke({"data": DOC, "path": path}))
    assert json.loads(out) == expected


async def test_json_query_keeps_non_ascii_text_readable() -> None:
    """Built-in json_query: output is JSON with non-ASCII characters kept."""
    assert await json_query.invoke({"data": DOC, "path": '["x.y"].z'}) == '"ü"'


@pytest.mark.parametrize(
    ("data", "path", "message"),
    [
        ("{bad", "a", "Invalid JSON in 'data'"),
        (DOC, "a.missing", "no key 'missing' at a (available keys: ['b'])"),
        (DOC, "a.b[5]", "index 5 out of range at a.b (list of length 2)"),
        (DOC, "a.b.c", "a.b is a list; use an index"),
        (DOC, "a.b[0].c.d", "a.b[0].c is a number, not an object or a list"),
        (DOC, "a..b", "Invalid path 'a..b'"),
        (DOC, "a[", "Invalid path 'a['"),
    ],
)
async def test_json_query_explains_bad_json_and_missing_paths(
    data: str, path: str, message: str
) -> None:
    """Built-in json_query: bad JSON and paths that do not exist are clear ToolErrors."""
    with pytest.raises(ToolError, match=_re(message)):
        await json_query.invoke({"data": data, "path": path})


@pytest.mark.parametrize(
    ("text", "stats"),
    [
        ("", {"characters": 0, "words": 0, "lines": 0, "sentences": 0}),
        ("Hello world. How are you?\nFine!", {"characters": 31, "words": 6, "lines": 2, "sentences": 3}),
        ("no terminator here", {"characters": 18, "words": 3, "lines": 1, "sentences": 1}),
        ("Wait... what?!  Yes.", {"characters": 20, "words": 3, "lines": 1, "sentences": 3}),
    ],
)
async def test_text_stats_counts_characters_words_lines_and_sentences(
    text: str, stats: dict[str, int]
) -> None:
    """Built-in text_stats: returns a JSON object with the four counts."""
    assert json.loads(str(await text_stats.invoke({"text": text}))) == stats


async def test_text_stats_returns_only_the_count_asked_for() -> None:
    """``only``: one count, as the bare number (nothing for a small model to misread)."""
    text = "the quick brown fox jumps over the lazy dog"
    assert await text_stats.invoke({"text": text, "only": "words"}) == "9"
    with pytest.raises(ToolArgumentsError, match="only"):
        await text_stats.invoke({"text": text, "only": "syllables"})


async def test_echo_is_the_spec_fixture() -> None:
    """§0 EchoTool: name echo, "Echoes the input text back.", one required string `text`."""
    assert echo.name == "echo"
    assert echo.description == "Echoes the input text back."
    params = echo.parameters()
    assert params["required"] == ["text"]
    assert params["properties"]["text"]["type"] == "string"
    assert await echo.invoke({"text": "hello"}) == "hello"


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [(1, 2, "3"), (1.5, 1.5, "3"), (0.1, 0.2, "0.3"), (-1, 0.5, "-0.5"), ("4", "5", "9")],
)
async def test_add_returns_the_sum_as_text_and_keeps_integers_integral(
    a: object, b: object, expected: str
) -> None:
    """T-A4: add{a:1, b:2} → "3"."""
    assert await add.invoke({"a": a, "b": b}) == expected


async def test_sleep_waits_asynchronously_and_reports_it() -> None:
    """Built-in sleep: async; two sleeps run concurrently on one event loop."""
    start = time.perf_counter()
    results = await asyncio.gather(
        sleep.invoke({"seconds": 0.2}), sleep.invoke({"seconds": 0.2})
    )
    assert list(results) == ["slept 0.2s", "slept 0.2s"]
    assert time.perf_counter() - start < 0.35
    assert sleep.metadata.get("testing") is True


@pytest.mark.parametrize("seconds", [-1, 30.5, "soon"])
async def test_sleep_refuses_durations_outside_0_to_30_seconds(seconds: object) -> None:
    """Built-in sleep: bounded 0..30 by validation; the error names the field."""
    with pytest.raises(ToolArgumentsError, match="seconds"):
        await sleep.invoke({"seconds": seconds})


def test_every_builtin_argument_has_a_description() -> None:
    """Built-ins: each pydantic field has a description for the LLM's schema."""
    for t in BUILTIN_TOOLS:
        assert t.description, t.name
        for name, prop in t.parameters()["properties"].items():
            assert prop.get("description"), f"{t.name}.{name}"


def test_builtin_registry_holds_every_builtin_in_order() -> None:
    """Built-ins: builtin_registry() registers BUILTIN_TOOLS in list order; the demo tools
    (echo, add, sleep) only on request (issue 10: not registered by default)."""
    assert builtin_registry().names() == ["calculator", "current_time", "json_query", "text_stats", "http_fetch"]
    assert builtin_registry(demo=True).names() == [
        "calculator", "current_time", "json_query", "text_stats", "http_fetch", "echo", "add", "sleep",
    ]
    assert builtin_registry() is not builtin_registry()


# --------------------------------------------------------------------------- Tool / registry


class GreetArgs(BaseModel):
    name: str = Field(description="Who to greet.")
    times: int = Field(1, ge=1, le=3, description="How often.")


def _greet(name: str, times: int) -> str:
    return " ".join([f"hi {name}"] * times)


async def _agreet(name: str, times: int) -> str:
    await asyncio.sleep(0)
    return f"async hi {name} x{times}"


async def test_a_sync_tool_runs_in_a_thread_and_an_async_tool_is_awaited() -> None:
    """Tool.invoke: sync functions run via a thread, coroutine functions are awaited."""
    sync_tool = Tool("greet", "Greets.", GreetArgs, _greet)
    async_tool = Tool("agreet", "Greets.", GreetArgs, _agreet)
    assert await sync_tool.invoke({"name": "ann", "times": 2}) == "hi ann hi ann"
    assert await async_tool.invoke({"name": "bob"}) == "async hi bob x1"


async def test_invalid_arguments_raise_an_error_naming_each_bad_field() -> None:
    """Tool.validate_args: ToolArgumentsError names the tool and every offending field."""
    greet = Tool("greet", "Greets.", GreetArgs, _greet)
    with pytest.raises(ToolArgumentsError) as err:
        await greet.invoke({"times": 9})
    message = str(err.value)
    assert "Invalid arguments for tool 'greet'" in message
    assert "name: Field required" in message
    assert "times: Input should be less than or equal to 3" in message
    assert isinstance(err.value, ToolError)


async def test_non_string_results_become_json_text_and_tool_results_pass_through() -> None:
    """Tool.invoke: dict → JSON text, None → "", ToolResult kept as-is."""

    class NoArgs(BaseModel):
        pass

    as_dict = Tool("d", "", NoArgs, lambda: {"k": "ü"})
    as_none = Tool("n", "", NoArgs, lambda: None)
    rich = ToolResult(content="# hi", content_type="markdown")
    as_rich = Tool("r", "", NoArgs, lambda: rich)
    assert await as_dict.invoke({}) == '{"k": "ü"}'
    assert await as_none.invoke({}) == ""
    assert await as_rich.invoke({}) == rich


async def test_a_tool_with_a_timeout_is_cancelled_when_it_runs_too_long() -> None:
    """Tool.timeout: the call is abandoned with TimeoutError."""
    slow = Tool("slow", "", sleep.args_model, sleep.fn, timeout=0.05)
    with pytest.raises(TimeoutError):
        await slow.invoke({"seconds": 1})


async def test_the_tool_decorator_builds_the_model_from_the_signature() -> None:
    """@tool: name, docstring description and a pydantic model from annotations."""

    @tool()
    async def multiply(a: int, b: int = 2) -> int:
        """Multiply two integers."""
        return a * b

    assert isinstance(multiply, Tool)
    assert multiply.name == "multiply"
    assert multiply.description == "Multiply two integers."
    assert multiply.parameters()["required"] == ["a"]
    assert await multiply.invoke({"a": 3}) == "6"
    with pytest.raises(ToolArgumentsError, match="a: "):
        await multiply.invoke({"a": "x"})


def test_the_registry_keeps_registration_order_and_refuses_duplicates() -> None:
    """S35: ToolRegistry keeps registration order; a second tool with one name is refused."""
    reg = ToolRegistry([add, echo, calculator])
    assert reg.names() == ["add", "echo", "calculator"]
    assert [t.name for t in reg] == ["add", "echo", "calculator"]
    assert len(reg) == 3 and "echo" in reg and "nope" not in reg
    with pytest.raises(ConfigError, match="'echo' is already registered"):
        reg.register(echo)


def test_filtered_keeps_the_original_order_and_drops_unknown_names() -> None:
    """S33/S35: filtered(names) keeps registration order, ignores unknown names."""
    reg = ToolRegistry([add, echo, calculator, sleep])
    sub = reg.filtered(["sleep", "nope", "add"])
    assert sub.names() == ["add", "sleep"]
    assert reg.names() == ["add", "echo", "calculator", "sleep"]
    assert reg.filtered([]).names() == []


def test_an_unknown_tool_names_the_available_tools() -> None:
    """ToolRegistry.get: `Unknown tool '<name>'. Available tools: [...]`."""
    reg = ToolRegistry([add, echo])
    with pytest.raises(ToolNotFound) as err:
        reg.get("search")
    assert str(err.value) == "Unknown tool 'search'. Available tools: ['add', 'echo']"


def test_openai_schema_is_a_function_definition() -> None:
    """S4: native tools payload `{type: function, function: {name, description, parameters}}`."""
    schema = echo.openai_schema()
    assert schema["type"] == "function"
    assert schema["function"]["name"] == "echo"
    assert "title" not in schema["function"]["parameters"]


# --------------------------------------------------------------------------- loader


@pytest.fixture
def plugin_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str], str]]:
    """Write a throwaway module on sys.path; returns a function(source) -> module name."""
    monkeypatch.syspath_prepend(str(tmp_path))
    created: list[str] = []

    def make(source: str) -> str:
        name = f"reactq_test_plugin_{uuid.uuid4().hex[:10]}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        created.append(name)
        return name

    yield make
    for name in created:
        sys.modules.pop(name, None)


TOOLS_SOURCE = """
    from pydantic import BaseModel, Field
    from reactq.shared.tools.base import Tool, ToolRegistry, tool

    @tool()
    def shout(text: str) -> str:
        '''Upper-case the text.'''
        return text.upper()

    @tool()
    def whisper(text: str) -> str:
        '''Lower-case the text.'''
        return text.lower()

    TOOLS = [shout, whisper]
    REGISTRY = ToolRegistry([whisper])

    def make_tools():
        return [shout]

    def make_registry():
        return ToolRegistry([shout, whisper])

    def needs_args(x):
        return [shout]

    def explodes():
        raise RuntimeError("no API key")

    async def async_factory():
        return [shout]

    NOT_A_TOOL = 42
    MIXED = [shout, "whisper"]

    class Holder:
        tools = [whisper]

    @tool()
    def echo(text: str) -> str:
        '''My own echo.'''
        return "custom " + text
"""


async def test_load_tools_accepts_a_tool_a_list_a_registry_and_zero_arg_factories(
    plugin_module: Callable[[str], str],
) -> None:
    """REACTQ_TOOLS: module:attr entries resolve to Tools, lists, registries or factories."""
    mod = plugin_module(TOOLS_SOURCE)
    assert [t.name for t in load_tools(f"{mod}:shout")] == ["shout"]
    assert [t.name for t in load_tools(f"{mod}:TOOLS")] == ["shout", "whisper"]
    assert [t.name for t in load_tools(f"{mod}:REGISTRY")] == ["whisper"]
    assert [t.name for t in load_tools(f"{mod}:make_tools")] == ["shout"]
    assert [t.name for t in load_tools(f"{mod}:make_registry")] == ["shout", "whisper"]
    assert [t.name for t in load_tools(f"{mod}:Holder.tools")] == ["whisper"]
    both = load_tools(f" {mod}:shout , {mod}:REGISTRY ,")
    assert [t.name for t in both] == ["shout", "whisper"]
    assert await both[0].invoke({"text": "hi"}) == "HI"


def test_an_empty_tools_spec_loads_nothing() -> None:
    """REACTQ_TOOLS unset or blank: no extra tools."""
    assert load_tools("") == []
    assert load_tools("  , ") == []
    assert load_tools(None) == []


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("no_colon_here", "expected 'module:attr'"),
        ("mod:", "expected 'module:attr'"),
        (":attr", "expected 'module:attr'"),
        ("reactq_no_such_module_xyz:TOOLS", "cannot import module 'reactq_no_such_module_xyz'"),
        ("{mod}:missing", "'{mod}' has no attribute 'missing'"),
        ("{mod}:Holder.nope", "'{mod}.Holder' has no attribute 'nope'"),
        ("{mod}:NOT_A_TOOL", "is of type int; expected Tool, a list of Tools, ToolRegistry"),
        ("{mod}:MIXED", "item 1 is of type str, not Tool"),
        ("{mod}:needs_args", "needs arguments ['x']"),
        ("{mod}:explodes", "calling it raised RuntimeError: no API key"),
        ("{mod}:async_factory", "factories must be synchronous"),
        ("{mod}:TOOLS,{mod}:shout", "tool 'shout' is already provided by entry '{mod}:TOOLS'"),
    ],
)
def test_load_tools_errors_are_config_errors_naming_the_entry_and_the_reason(
    plugin_module: Callable[[str], str], entry: str, reason: str
) -> None:
    """REACTQ_TOOLS: every failure is a ConfigError `REACTQ_TOOLS entry '<e>': <why>`."""
    mod = plugin_module(TOOLS_SOURCE)
    entry, reason = entry.format(mod=mod), reason.format(mod=mod)
    with pytest.raises(ConfigError) as err:
        load_tools(entry)
    assert "REACTQ_TOOLS entry '" in str(err.value)
    assert reason in str(err.value)


def test_a_module_that_fails_to_import_is_reported_with_its_exception(
    plugin_module: Callable[[str], str],
) -> None:
    """REACTQ_TOOLS: an exception raised while importing the user's module is a ConfigError."""
    mod = plugin_module("raise ValueError('bad config')\n")
    with pytest.raises(ConfigError, match=f"importing module '{mod}' raised ValueError: bad config"):
        load_tools(f"{mod}:TOOLS")


def test_default_registry_is_the_builtins_then_the_loaded_tools(
    plugin_module: Callable[[str], str],
) -> None:
    """default_registry(settings): built-ins first, then REACTQ_TOOLS, in order."""
    mod = plugin_module(TOOLS_SOURCE)
    reg = default_registry(Settings(tools=f"{mod}:TOOLS"))
    assert reg.names() == [t.name for t in BUILTIN_TOOLS] + ["shout", "whisper"]
    assert default_registry(Settings(tools="")).names() == [t.name for t in BUILTIN_TOOLS]


def test_demo_tools_are_registered_only_with_reactq_demo_tools(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 10: echo, add, sleep are not default tools; REACTQ_DEMO_TOOLS=true brings them."""
    monkeypatch.delenv("REACTQ_DEMO_TOOLS", raising=False)
    assert not {"echo", "add", "sleep"} & set(default_registry(Settings(tools="")).names())
    monkeypatch.setenv("REACTQ_DEMO_TOOLS", "true")
    assert {"echo", "add", "sleep"} <= set(default_registry(Settings(tools="")).names())


async def test_a_loaded_tool_replaces_the_builtin_of_the_same_name(
    plugin_module: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    """default_registry: a loaded tool named like a built-in replaces it (and says so)."""
    mod = plugin_module(TOOLS_SOURCE)
    reg = default_registry(Settings(tools=f"{mod}:echo", demo_tools=True))
    assert reg.names().count("echo") == 1
    assert await reg.get("echo").invoke({"text": "x"}) == "custom x"
    assert "replaces the built-in tool 'echo'" in caplog.text
