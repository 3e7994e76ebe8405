"""Module-level tools that tool-runner processes import by name (tests of isolation)."""

from __future__ import annotations

import ctypes
import os
import signal

from pydantic import BaseModel, Field

from reactq.shared.errors import ToolError
from reactq.shared.tools.base import Tool, tool


class HoldArgs(BaseModel):
    seconds: int = Field(description="how long to hold the GIL")


def hold_gil(seconds: int) -> str:
    """libc ``sleep`` through ``ctypes.PyDLL`` (which keeps the GIL): one C call holding the
    GIL, like a long C loop, without burning a CPU."""
    ctypes.PyDLL(None).sleep(seconds)
    return "held"


def pid() -> str:
    return str(os.getpid())


def refuse() -> str:
    raise ToolError("refused for a reason")


def crash() -> str:
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


class NoArgs(BaseModel):
    pass


hold = Tool(name="hold_gil", description="Holds the GIL.", args_model=HoldArgs, fn=hold_gil)
whoami = Tool(name="whoami", description="Its pid.", args_model=NoArgs, fn=pid)
refuser = Tool(name="refuser", description="Raises ToolError.", args_model=NoArgs, fn=refuse)
crasher = Tool(name="crasher", description="Kills its own process.", args_model=NoArgs, fn=crash)


@tool()
async def decorated(text: str) -> str:
    """An async @tool function: the module attribute is the Tool, not the function."""
    return f"{text} from {os.getpid()}"


def make_closure_tool() -> Tool:
    def inner() -> str:
        return str(os.getpid())
    return Tool(name="closure", description="A closure.", args_model=NoArgs, fn=inner)
