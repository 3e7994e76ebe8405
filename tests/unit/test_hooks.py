"""Hooks: the registry's ordering, blocking and chaining rules (SPEC S36–S36c), the
built-in hooks (S36f) and the ``REACTQ_HOOKS`` loader."""

from __future__ import annotations

import logging
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reactq.shared.hooks.builtins import (
    builtin_hooks,
    connector_call_logger,
    deny_tools,
    make_rate_limiter,
    make_result_truncator,
    rate_limiter,
    read_only_mode,
    result_truncator,
)
from reactq.shared.errors import ConfigError
from reactq.shared.hooks import Handler, Hook, HookContext, HookPoint, HookRegistry, HookResult
from reactq.shared.hooks.loader import default_hooks, load_hooks
from reactq.shared.settings import Settings

PRE, POST, START = HookPoint.PRE_TOOL_USE, HookPoint.POST_TOOL_USE, HookPoint.SESSION_START


def pre_ctx(tool: str | None = "echo", args: dict[str, object] | None = None) -> HookContext:
    return HookContext(hook_point=PRE, tool_name=tool, tool_args=args or {"text": "hi"})


def post_ctx(result: str, tool: str | None = "echo") -> HookContext:
    return HookContext(hook_point=POST, tool_name=tool, tool_args={}, tool_result=result)


def recorder(
    log: list[str], label: str, result: HookResult | None = None
) -> Handler:
    """An async handler that appends ``label`` to ``log`` and returns ``result``."""

    async def handler(ctx: HookContext) -> HookResult:
        log.append(label)
        return result if result is not None else HookResult()

    return handler


async def crash(ctx: HookContext) -> HookResult:
    raise RuntimeError("hook bug")


# --------------------------------------------------------------------------- S36 model


def test_hook_points_have_the_spec_string_values() -> None:
    """S36: PRE_TOOL_USE, POST_TOOL_USE and SESSION_START carry the seed's strings."""
    assert PRE.value == "pre_tool_use"
    assert POST.value == "post_tool_use"
    assert START.value == "session_start"


def test_hook_result_defaults_allow_with_nothing_changed() -> None:
    """S36: HookResult{allow=True, modified_args=None, modified_result=None, side_effects=[], error=None}."""
    res = HookResult()
    assert (res.allow, res.modified_args, res.modified_result, res.side_effects, res.error) == (
        True, None, None, [], None,
    )
    assert HookResult().side_effects is not res.side_effects


def test_a_hook_defaults_to_priority_0_no_filter_and_no_description() -> None:
    """S36: a hook is (name, point, handler, description="", priority=0, tool_filter=None)."""
    hook = Hook("h", PRE, crash)
    assert (hook.description, hook.priority, hook.tool_filter) == ("", 0, None)


@pytest.mark.parametrize(
    ("tool_filter", "tool_name", "matches"),
    [
        (None, "echo", True),
        (None, None, True),
        ("github__*", "github__create_issue", True),
        ("github__*", "slack__post", False),
        ("*__*", "slack__post", True),
        ("*__*", "echo", False),
        ("ech?", "echo", True),
        ("echo", "echo", True),
        ("echo", "echo2", False),
        ("*", "anything", True),
        ("*", None, False),
        ("echo", None, False),
    ],
)
def test_tool_filter_is_an_fnmatch_glob_and_never_matches_a_missing_tool_name(
    tool_filter: str | None, tool_name: str | None, matches: bool
) -> None:
    """S36: no filter matches every tool (even None); a filter never matches a None tool name."""
    assert Hook("h", PRE, crash, tool_filter=tool_filter).matches(tool_name) is matches


# --------------------------------------------------------------------------- S36a ordering, crashes


@pytest.mark.parametrize("point", [PRE, POST])
async def test_hooks_run_in_ascending_priority_30_10_20_as_10_20_30(point: HookPoint) -> None:
    """S36a / T-D3: priorities 30, 10, 20 (registered in that order) run as 10, 20, 30."""
    log: list[str] = []
    reg = HookRegistry(
        [Hook(f"p{p}", point, recorder(log, str(p)), priority=p) for p in (30, 10, 20)]
    )
    if point is PRE:
        await reg.run_pre_tool(pre_ctx())
    else:
        await reg.run_post_tool(post_ctx("x"))
    assert log == ["10", "20", "30"]


async def test_hooks_with_equal_priority_run_in_registration_order() -> None:
    """S36a: ties keep registration order."""
    log: list[str] = []
    reg = HookRegistry()
    for label in ("first", "second", "third"):
        reg.register(Hook(label, PRE, recorder(log, label), priority=5))
    reg.register(Hook("early", PRE, recorder(log, "early"), priority=-1))
    await reg.run_pre_tool(pre_ctx())
    assert log == ["early", "first", "second", "third"]


async def test_a_crashing_hook_does_not_stop_the_next_hook_and_the_call_is_allowed() -> None:
    """S36a / T-D3: a hook raising at priority 1 is a side effect; priority 2 still runs; allow=True."""
    log: list[str] = []
    reg = HookRegistry([
        Hook("second", PRE, recorder(log, "second"), priority=2),
        Hook("boom", PRE, crash, priority=1),
    ])
    res = await reg.run_pre_tool(pre_ctx())
    assert log == ["second"]
    assert res.allow is True
    assert res.error is None
    assert res.side_effects == ["Hook 'boom' failed with exception"]


async def test_a_crashing_post_hook_keeps_the_result_of_the_others() -> None:
    """S36a: a POST hook that raises never loses the observation or crashes the run."""
    reg = HookRegistry([
        Hook("boom", POST, crash, priority=1),
        Hook("tag", POST, _wrapper("T"), priority=2),
    ])
    res = await reg.run_post_tool(post_ctx("data"))
    assert res.modified_result == "[T]data[/T]"
    assert res.side_effects == ["Hook 'boom' failed with exception"]


async def test_a_handler_that_returns_none_or_is_synchronous_does_not_crash_the_run() -> None:
    """S36a: a hook can never crash the agent, even when written wrongly (None return, sync def)."""

    async def forgot_return(ctx: HookContext) -> None:
        return None

    def sync_block(ctx: HookContext) -> HookResult:
        return HookResult(allow=False, error="sync says no")

    async def wrong_type(ctx: HookContext) -> str:
        return "yes"

    # These handlers break the Handler type on purpose: the registry must survive them.
    reg = HookRegistry([
        Hook("none", PRE, forgot_return),  # type: ignore[arg-type]
        Hook("odd", PRE, wrong_type),  # type: ignore[arg-type]
    ])
    res = await reg.run_pre_tool(pre_ctx())
    assert res.allow is True
    assert res.side_effects == ["Hook 'odd' failed with exception"]
    reg.register(Hook("sync", PRE, sync_block, priority=5))  # type: ignore[arg-type]
    assert (await reg.run_pre_tool(pre_ctx())).error == "sync says no"


# --------------------------------------------------------------------------- S36b pre


async def test_a_blocking_hook_at_priority_1_prevents_the_priority_2_hook() -> None:
    """S36b / T-D3: the first allow=False stops the chain and carries its error."""
    log: list[str] = []
    reg = HookRegistry([
        Hook("later", PRE, recorder(log, "later"), priority=2),
        Hook("guard", PRE, recorder(log, "guard", HookResult(
            allow=False, error="Blocked by test hook", side_effects=["audited"])), priority=1),
    ])
    res = await reg.run_pre_tool(pre_ctx())
    assert log == ["guard"]
    assert res.allow is False
    assert res.error == "Blocked by test hook"
    assert res.side_effects == ["audited"]
    assert res.modified_args is None


async def test_a_block_without_an_error_message_names_the_hook() -> None:
    """S36b: error = result.error or "Blocked by hook '<name>'"."""
    reg = HookRegistry([Hook("policy", PRE, recorder([], "x", HookResult(allow=False)))])
    res = await reg.run_pre_tool(pre_ctx())
    assert res.error == "Blocked by hook 'policy'"


async def test_modified_args_chain_from_hook_to_hook_and_the_last_one_wins() -> None:
    """S36b / T-D2: each PRE hook sees the args as modified by earlier hooks."""
    seen: list[dict[str, object]] = []

    def adder(key: str, value: str) -> Handler:
        async def handler(ctx: HookContext) -> HookResult:
            seen.append(dict(ctx.tool_args or {}))
            return HookResult(modified_args={**(ctx.tool_args or {}), key: value})
        return handler

    async def observer(ctx: HookContext) -> HookResult:
        seen.append(dict(ctx.tool_args or {}))
        return HookResult()  # no change: the earlier modification stands

    reg = HookRegistry([
        Hook("inject", PRE, adder("injected", "by_hook"), priority=1),
        Hook("tag", PRE, adder("tag", "t"), priority=2),
        Hook("observer", PRE, observer, priority=3),
    ])
    res = await reg.run_pre_tool(pre_ctx(args={"text": "original"}))
    assert seen == [
        {"text": "original"},
        {"text": "original", "injected": "by_hook"},
        {"text": "original", "injected": "by_hook", "tag": "t"},
    ]
    assert res.allow is True
    assert res.modified_args == {"text": "original", "injected": "by_hook", "tag": "t"}


async def test_no_modification_leaves_modified_args_none_and_merges_side_effects() -> None:
    """S36b: modified_args stays None when no hook changes them; side effects of all hooks merge."""
    reg = HookRegistry([
        Hook("a", PRE, recorder([], "a", HookResult(side_effects=["a1", "a2"]))),
        Hook("b", PRE, recorder([], "b", HookResult(side_effects=["b1"]))),
    ])
    res = await reg.run_pre_tool(pre_ctx())
    assert res.modified_args is None
    assert res.side_effects == ["a1", "a2", "b1"]


async def test_pre_hooks_whose_filter_does_not_match_are_skipped() -> None:
    """S36b: run_pre_tool skips hooks whose tool_filter does not match the tool."""
    log: list[str] = []
    reg = HookRegistry([
        Hook("github_only", PRE, recorder(log, "github"), tool_filter="github__*"),
        Hook("all", PRE, recorder(log, "all")),
        Hook("blocker", PRE, recorder(log, "blocker", HookResult(allow=False)), tool_filter="slack__*"),
    ])
    res = await reg.run_pre_tool(pre_ctx("github__list_issues"))
    assert log == ["github", "all"]
    assert res.allow is True
    log.clear()
    await reg.run_pre_tool(pre_ctx(None))
    assert log == ["all"]


# --------------------------------------------------------------------------- S36c post, session start


def _wrapper(tag: str) -> Handler:
    async def wrap(ctx: HookContext) -> HookResult:
        return HookResult(modified_result=f"[{tag}]{ctx.tool_result}[/{tag}]")
    return wrap


async def test_post_wrappers_a_then_b_nest_as_b_around_a() -> None:
    """S36c: two wrappers A then B give [B][A]data[/A][/B]."""
    reg = HookRegistry([
        Hook("B", POST, _wrapper("B"), priority=2),
        Hook("A", POST, _wrapper("A"), priority=1),
    ])
    res = await reg.run_post_tool(post_ctx("data"))
    assert res.modified_result == "[B][A]data[/A][/B]"


async def test_post_hooks_cannot_block_and_unchanged_results_stay_none() -> None:
    """S36c: run_post_tool cannot block; modified_result = last non-None one (None if none)."""
    reg = HookRegistry([
        Hook("tries_to_block", POST, recorder([], "x", HookResult(allow=False, error="no"))),
    ])
    res = await reg.run_post_tool(post_ctx("data"))
    assert res.allow is True
    assert res.modified_result is None
    assert res.error is None


async def test_post_hook_modification_from_t_d3_prefixes_the_observation() -> None:
    """T-D3: a POST hook returning "[modified] " + result rewrites the observation."""

    async def modify(ctx: HookContext) -> HookResult:
        return HookResult(modified_result="[modified] " + (ctx.tool_result or ""))

    reg = HookRegistry([Hook("m", POST, modify)])
    res = await reg.run_post_tool(post_ctx("hello"))
    assert res.modified_result == "[modified] hello"


async def test_session_start_runs_every_session_hook_ignoring_filters_and_merges_effects() -> None:
    """S36c: run_session_start runs all SESSION_START hooks (no filter) and merges side effects."""
    log: list[str] = []
    reg = HookRegistry([
        Hook("s2", START, recorder(log, "s2", HookResult(side_effects=["two"])), priority=2, tool_filter="x"),
        Hook("s1", START, recorder(log, "s1", HookResult(allow=False, side_effects=["one"])), priority=1),
        Hook("pre", PRE, recorder(log, "pre")),
        Hook("boom", START, crash, priority=3),
    ])
    res = await reg.run_session_start(HookContext(hook_point=START))
    assert log == ["s1", "s2"]
    assert res.allow is True
    assert res.side_effects == ["one", "two", "Hook 'boom' failed with exception"]


def test_a_registry_iterates_its_hooks_in_registration_order() -> None:
    """S36a: HookRegistry keeps registration order (len and iteration)."""
    hooks = [Hook("b", PRE, crash, priority=2), Hook("a", POST, crash, priority=1)]
    reg = HookRegistry(hooks)
    assert len(reg) == 2
    assert list(reg) == hooks


# --------------------------------------------------------------------------- S36f built-ins


async def test_result_truncator_cuts_results_over_8000_chars_and_names_the_full_length() -> None:
    """S36f: result_truncator (POST, priority 100): > 8000 chars → 8000 + truncation note."""
    assert (result_truncator.hook_point, result_truncator.priority) == (POST, 100)
    reg = HookRegistry([result_truncator])
    long = "a" * 7999 + "bc" + "z" * 999
    res = await reg.run_post_tool(post_ctx(long))
    assert res.modified_result == "a" * 7999 + "b" + "\n\n[truncated -- full output: 9000 chars]"
    assert (await reg.run_post_tool(post_ctx("x" * 8000))).modified_result is None
    assert (await reg.run_post_tool(post_ctx(""))).modified_result is None


async def test_result_truncator_runs_after_other_post_hooks() -> None:
    """S36f + S36c: priority 100 means it sees what earlier POST hooks produced."""
    reg = HookRegistry([make_result_truncator(10), Hook("wrap", POST, _wrapper("W"))])
    res = await reg.run_post_tool(post_ctx("abcdef"))
    assert res.modified_result == "[W]abcdef[\n\n[truncated -- full output: 13 chars]"


async def test_rate_limiter_allows_10_connector_calls_per_60s_then_blocks_with_a_retry_hint() -> None:
    """S36f: rate_limiter blocks the 11th call to one connector tool within 60 s."""
    now = [1000.0]
    reg = HookRegistry([make_rate_limiter(clock=lambda: now[0])])
    for i in range(10):
        now[0] = 1000.0 + i
        assert (await reg.run_pre_tool(pre_ctx("github__search"))).allow is True
    now[0] = 1015.0
    res = await reg.run_pre_tool(pre_ctx("github__search"))
    assert res.allow is False
    assert res.error == (
        "Rate limit exceeded for 'github__search': max 10 calls per 60s. Try again in 45s."
    )
    # Another connector tool has its own window.
    assert (await reg.run_pre_tool(pre_ctx("github__list"))).allow is True
    # Blocked calls are not counted: once the first call leaves the window, one slot frees.
    now[0] = 1060.0
    assert (await reg.run_pre_tool(pre_ctx("github__search"))).allow is True
    assert (await reg.run_pre_tool(pre_ctx("github__search"))).allow is False


async def test_rate_limiter_ignores_tools_without_a_double_underscore() -> None:
    """S36f: only tool names containing '__' are rate limited."""
    assert rate_limiter.hook_point is PRE and rate_limiter.tool_filter == "*__*"
    reg = HookRegistry([make_rate_limiter(max_calls=1, clock=lambda: 0.0)])
    for _ in range(20):
        assert (await reg.run_pre_tool(pre_ctx("echo"))).allow is True
    assert (await reg.run_pre_tool(pre_ctx("a__b"))).allow is True
    assert (await reg.run_pre_tool(pre_ctx("a__b"))).allow is False


def test_rate_limiter_refuses_nonsense_limits() -> None:
    """S36f: max_calls >= 1 and a positive window."""
    with pytest.raises(ConfigError):
        make_rate_limiter(max_calls=0)
    with pytest.raises(ConfigError):
        make_rate_limiter(window_seconds=0)


async def test_connector_call_logger_logs_connector_calls_and_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """S36f: connector_call_logger (POST, priority 0) only observes."""
    assert (connector_call_logger.hook_point, connector_call_logger.priority) == (POST, 0)
    reg = HookRegistry([connector_call_logger])
    with caplog.at_level(logging.INFO, logger="reactq.shared.hooks.builtins"):
        res = await reg.run_post_tool(post_ctx("result", tool="github__search"))
        await reg.run_post_tool(post_ctx("result", tool="echo"))
    assert res.modified_result is None
    assert "connector call github__search" in caplog.text
    assert "echo" not in caplog.text


def test_builtin_hooks_returns_fresh_instances_of_the_three_s36f_hooks() -> None:
    """S36f: builtin_hooks() → result_truncator, rate_limiter, connector_call_logger, new each call."""
    first, second = builtin_hooks(), builtin_hooks()
    assert [h.name for h in first] == ["result_truncator", "rate_limiter", "connector_call_logger"]
    assert first[1].handler is not second[1].handler


async def test_deny_tools_blocks_the_listed_tools_with_a_reason() -> None:
    """Policy example (S36b): deny_tools(names) blocks matching tools before they run."""
    reg = HookRegistry([deny_tools(["shell", "github__delete_*"], reason="not in production")])
    res = await reg.run_pre_tool(pre_ctx("github__delete_repo"))
    assert res.allow is False
    assert res.error == "Tool 'github__delete_repo' is not allowed: not in production"
    assert (await reg.run_pre_tool(pre_ctx("shell"))).allow is False
    assert (await reg.run_pre_tool(pre_ctx("shellcheck"))).allow is True
    assert (await reg.run_pre_tool(pre_ctx("echo"))).allow is True
    assert (await HookRegistry([deny_tools("echo")]).run_pre_tool(pre_ctx("echo"))).allow is False


@pytest.mark.parametrize(
    ("tool", "metadata", "allowed"),
    [
        ("search", {}, True),
        ("compute_output", {}, True),
        ("github__create_issue", {}, False),
        ("writeFile", {}, False),
        ("slack__post", {}, False),
        ("search", {"requires_confirmation": True}, False),
    ],
)
async def test_read_only_mode_blocks_tools_that_look_state_changing(
    tool: str, metadata: dict[str, object], allowed: bool
) -> None:
    """Policy example (S36b, S36e): read_only_mode blocks write-verb names and confirm-required tools."""
    reg = HookRegistry([read_only_mode()])
    ctx = pre_ctx(tool)
    ctx.metadata.update(metadata)
    res = await reg.run_pre_tool(ctx)
    assert res.allow is allowed
    if not allowed:
        assert res.error == f"Read-only mode: tool '{tool}' may modify state and is blocked."


async def test_read_only_mode_lets_explicitly_allowed_tools_through() -> None:
    """Policy example (S36b): `allow` globs override the write-verb heuristic."""
    reg = HookRegistry([read_only_mode(allow=["memory__update*"])])
    assert (await reg.run_pre_tool(pre_ctx("memory__update_note"))).allow is True
    assert (await reg.run_pre_tool(pre_ctx("notes__update"))).allow is False


# --------------------------------------------------------------------------- REACTQ_HOOKS loader


@pytest.fixture
def plugin_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    """Write a throwaway module on sys.path; returns a function(source) -> module name."""
    monkeypatch.syspath_prepend(str(tmp_path))
    created: list[str] = []

    def make(source: str) -> str:
        name = f"reactq_test_hooks_{uuid.uuid4().hex[:10]}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        created.append(name)
        return name

    yield make
    for name in created:
        sys.modules.pop(name, None)


HOOKS_SOURCE = """
    from reactq.shared.hooks import Hook, HookPoint, HookRegistry, HookResult

    async def _tag(ctx):
        return HookResult(side_effects=["tagged"])

    TAG = Hook("tag", HookPoint.PRE_TOOL_USE, _tag)
    AUDIT = Hook("audit", HookPoint.POST_TOOL_USE, _tag)
    HOOKS = [TAG, AUDIT]
    REGISTRY = HookRegistry([AUDIT])

    def make_hooks():
        return HookRegistry([TAG])

    NOT_A_HOOK = "tag"
"""


def test_load_hooks_accepts_a_hook_a_list_a_registry_and_factories(
    plugin_module: Callable[[str], str],
) -> None:
    """REACTQ_HOOKS: module:attr entries → Hook, list of Hooks, HookRegistry or zero-arg factory."""
    mod = plugin_module(HOOKS_SOURCE)
    assert [h.name for h in load_hooks(f"{mod}:TAG")] == ["tag"]
    assert [h.name for h in load_hooks(f"{mod}:HOOKS")] == ["tag", "audit"]
    assert [h.name for h in load_hooks(f"{mod}:REGISTRY")] == ["audit"]
    assert [h.name for h in load_hooks(f"{mod}:make_hooks")] == ["tag"]
    combined = load_hooks(f"{mod}:TAG, reactq.shared.hooks.builtins:read_only_mode")
    assert [h.name for h in combined] == ["tag", "read_only_mode"]
    assert len(load_hooks("")) == 0


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("{mod}", "expected 'module:attr'"),
        ("reactq_missing_hooks_xyz:HOOKS", "cannot import module"),
        ("{mod}:nope", "has no attribute 'nope'"),
        ("{mod}:NOT_A_HOOK", "is of type str; expected Hook, a list of Hooks, HookRegistry"),
        ("reactq.shared.hooks.builtins:deny_tools", "needs arguments ['names']"),
        ("{mod}:_tag", "needs arguments ['ctx']"),
    ],
)
def test_load_hooks_errors_are_config_errors_naming_the_entry(
    plugin_module: Callable[[str], str], entry: str, reason: str
) -> None:
    """REACTQ_HOOKS: every failure is a ConfigError `REACTQ_HOOKS entry '<e>': <why>`."""
    mod = plugin_module(HOOKS_SOURCE)
    entry = entry.format(mod=mod)
    with pytest.raises(ConfigError) as err:
        load_hooks(entry)
    assert f"REACTQ_HOOKS entry '{entry}'" in str(err.value)
    assert reason in str(err.value)


async def test_default_hooks_are_the_builtins_then_the_loaded_hooks(
    plugin_module: Callable[[str], str],
) -> None:
    """S36f + REACTQ_HOOKS: default_hooks(settings) = built-ins, then the loaded hooks."""
    mod = plugin_module(HOOKS_SOURCE)
    reg = default_hooks(Settings(hooks=f"{mod}:HOOKS"))
    assert [h.name for h in reg] == [
        "result_truncator", "rate_limiter", "connector_call_logger", "tag", "audit",
    ]
    assert [h.name for h in default_hooks(Settings(hooks=""), builtins=False)] == []
    res = await reg.run_pre_tool(pre_ctx())
    assert res.side_effects == ["tagged"]


def test_the_connector_rate_limit_comes_from_settings_and_0_leaves_it_out() -> None:
    from reactq.shared.hooks.loader import default_hooks
    from reactq.shared.settings import Settings

    limited = [h for h in default_hooks(Settings(connector_rate_limit=3, connector_rate_window_s=5)) if h.name == "rate_limiter"]
    assert len(limited) == 1 and "3 calls per 5s" in limited[0].description
    assert "rate_limiter" not in [h.name for h in default_hooks(Settings(connector_rate_limit=0))]
    assert "10 calls per 60s" in next(h for h in default_hooks(Settings()) if h.name == "rate_limiter").description
