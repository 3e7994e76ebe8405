"""Tool calls in tool-runner processes (issue 10, items 1 and 2): a GIL-holding call does not
stall the calling process and is stopped at its deadline; errors, crashes and tools that
cannot be located are handled. Real child processes; no Redis."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from reactq.shared.engine.toolexec import execute_call
from reactq.shared.errors import ToolError
from reactq.shared.hooks import HookRegistry
from reactq.shared.models import ToolCallRequest
from reactq.shared.settings import Settings
from reactq.shared.tools.base import ToolRegistry
from reactq.shared.tools.isolation import ToolProcessDied, ToolTimeoutError, pool
from reactq.shared.tools.loader import default_registry
from tests.unit import isolation_tools as T


async def test_an_importable_tool_runs_in_a_reused_tool_runner_process() -> None:
    first = await T.whoami.invoke({})
    assert int(first) != os.getpid()
    assert await T.whoami.invoke({}) == first, "the idle child is reused"
    assert (await T.decorated.invoke({"text": "hi"})).startswith("hi from "), "@tool functions too"
    assert not (await T.decorated.invoke({"text": "x"})).endswith(str(os.getpid()))


async def test_a_gil_holding_call_is_killed_at_its_deadline_while_this_process_runs_on() -> None:
    """Item 2: the deadline stops a call that holds the GIL (a thread could not be stopped);
    item 1: meanwhile the caller's other threads (a lease heartbeat) keep running."""
    ticks = 0
    stop = threading.Event()

    def heartbeat() -> None:
        nonlocal ticks
        while not stop.wait(0.05):
            ticks += 1

    beat = threading.Thread(target=heartbeat, daemon=True)
    beat.start()
    started = time.monotonic()
    with pytest.raises(ToolTimeoutError, match=r"timed out after 1s .*REACTQ_TOOL_TIMEOUT"):
        await T.hold.invoke({"seconds": 30}, default_timeout=1)
    elapsed = time.monotonic() - started
    stop.set()
    assert elapsed < 10, "stopped at the deadline, not after the 30 s hold"
    assert ticks >= 5, "the heartbeat thread was not starved"
    assert isinstance(ToolTimeoutError("x"), TimeoutError)


async def test_tool_errors_pass_through_and_a_dead_child_is_replaced() -> None:
    with pytest.raises(ToolError, match="^refused for a reason$"):
        await T.refuser.invoke({})
    with pytest.raises(ToolProcessDied, match="killed by signal 9"):
        await T.crasher.invoke({})
    assert int(await T.whoami.invoke({})) != os.getpid()


async def test_a_tool_the_runner_cannot_locate_runs_in_process_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    closure = T.make_closure_tool()
    with caplog.at_level(logging.WARNING):
        assert await closure.invoke({}) == str(os.getpid())
        await closure.invoke({})
    assert caplog.text.count("not importable by name") == 1


async def test_the_registry_deadline_applies_to_every_call_through_execute_call() -> None:
    """REACTQ_TOOL_TIMEOUT reaches calls through the registry (default_registry sets it)."""
    reg = ToolRegistry([T.hold], default_timeout=1)
    assert reg.filtered(["hold_gil"]).default_timeout == 1
    call = ToolCallRequest(id="c1", name="hold_gil", arguments={"seconds": 30})
    out = await execute_call(call, registry=reg, hooks=HookRegistry(), run_id="r1")
    assert out.error is not None and "timed out after 1s" in out.error


def test_default_registry_takes_the_deadline_from_settings() -> None:
    assert default_registry(Settings(tools="", tool_timeout=7)).default_timeout == 7
    assert Settings(tools="").tool_timeout == 60


@pytest.fixture
def factory_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A REACTQ_TOOLS module whose tool is a closure built by a factory."""
    monkeypatch.syspath_prepend(str(tmp_path))
    name = f"reactq_test_factory_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent("""
        import os
        from pydantic import BaseModel
        from reactq.shared.tools.base import Tool

        class NoArgs(BaseModel):
            pass

        def make():
            def inner():
                return str(os.getpid())
            return Tool(name="made", description="A factory's closure.", args_model=NoArgs, fn=inner)
    """))
    yield name
    sys.modules.pop(name, None)


async def test_a_factory_built_tool_is_rebuilt_from_its_reactq_tools_entry_in_the_runner(
    factory_module: str,
) -> None:
    reg = default_registry(Settings(tools=f"{factory_module}:make"))
    assert int(await reg.get("made").invoke({})) != os.getpid()


def test_the_pool_is_per_process() -> None:
    assert pool() is pool()


async def test_concurrent_calls_each_get_a_child() -> None:
    pids = await asyncio.gather(*(T.whoami.invoke({}) for _ in range(3)))
    assert os.getpid() not in {int(p) for p in pids}


async def test_cancelling_the_caller_stops_the_tool_runner() -> None:
    """A cancelled run does not leave its tool running until the deadline."""
    task = asyncio.ensure_future(T.hold.invoke({"seconds": 30}, default_timeout=60))
    await asyncio.sleep(0.2)
    deadline = time.monotonic() + 20
    while not pool()._running and time.monotonic() < deadline:  # the call reached its child
        await asyncio.sleep(0.05)
    (child,) = pool()._running.values()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert child.proc.wait(10) == -9, "killed at once, not after the 30 s hold"


@pytest.fixture
def slow_import_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A tool module whose import takes 2 s (a heavy dependency), its tool instant."""
    monkeypatch.syspath_prepend(str(tmp_path))
    name = f"reactq_test_slow_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent("""
        import os, time
        from reactq.shared.tools.base import tool

        if os.environ.get("REACTQ_TOOL_RUNNER_CHILD") != "no":
            time.sleep(2.0)

        @tool("quick", timeout=1.0)
        def quick() -> str:
            \"\"\"Answers at once.\"\"\"
            return str(os.getpid())
    """))
    monkeypatch.setenv("REACTQ_TOOL_RUNNER_CHILD", "no")  # only the runner's import is slow
    yield name
    sys.modules.pop(name, None)


async def test_the_deadline_counts_the_tool_not_a_cold_runner_loading_it(slow_import_module: str) -> None:
    """A cold runner starts an interpreter and imports the tool's module before the call: on a
    busy host that alone can pass a short timeout. The deadline starts once the tool is loaded."""
    import importlib

    mod = importlib.import_module(slow_import_module)
    os.environ["REACTQ_TOOL_RUNNER_CHILD"] = "yes"  # the child inherits it: its import sleeps
    assert int(await mod.quick.invoke({})) != os.getpid()
    with pytest.raises(ToolTimeoutError, match=r"timed out after 1s"):
        await T.hold.invoke({"seconds": 30}, default_timeout=1)  # the tool's own time still counts
