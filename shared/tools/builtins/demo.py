"""Demo/test tools ``echo``, ``add``, ``sleep``: registered only with ``REACTQ_DEMO_TOOLS=true``."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field
from reactq.shared.tools.base import Tool
from reactq.shared.tools.builtins.numbers import Number, format_number

# --------------------------------------------------------------------------- echo, add, sleep


class EchoArgs(BaseModel):
    text: str = Field(description="The text to echo back.")


def _echo(text: str) -> str:
    return text


echo = Tool(
    name="echo",
    inline=True,
    isolate=False,
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
    isolate=False,
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
    isolate=False,
    metadata={"testing": True},
)
