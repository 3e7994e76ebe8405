"""``@reactq.hook``: points by value or seed name, glob, priority, sync and async handlers."""

import asyncio

import pytest

import reactq
from reactq.shared.hooks.decorator import hook_point


@pytest.mark.parametrize("name, point", [
    ("pre_tool_use", reactq.HookPoint.PRE_TOOL_USE), ("PreToolUse", reactq.HookPoint.PRE_TOOL_USE),
    ("PostToolUse", reactq.HookPoint.POST_TOOL_USE), ("session_start", reactq.HookPoint.SESSION_START),
])
def test_points_by_value_and_by_the_seeds_names(name, point):
    assert hook_point(name) is point


def test_an_unknown_point_names_the_valid_ones():
    with pytest.raises(ValueError, match="pre_tool_use"):
        reactq.hook("before_tool")


def test_the_decorator_builds_a_hook_that_the_registry_runs():
    @reactq.hook("PreToolUse", tools="crm__*", priority=5)
    async def deny(ctx: reactq.HookContext) -> reactq.HookResult:
        """No CRM writes."""
        return reactq.HookResult(allow=False, error="read-only")

    assert isinstance(deny, reactq.Hook) and deny.name == "deny" and deny.priority == 5
    assert deny.description == "No CRM writes."
    reg = reactq.HookRegistry([deny])
    ctx = reactq.HookContext(hook_point=reactq.HookPoint.PRE_TOOL_USE, tool_name="crm__update", tool_args={})
    assert asyncio.run(reg.run_pre_tool(ctx)).error == "read-only"
    other = reactq.HookContext(hook_point=reactq.HookPoint.PRE_TOOL_USE, tool_name="calculator", tool_args={})
    assert asyncio.run(reg.run_pre_tool(other)).allow
