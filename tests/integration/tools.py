"""Tools the integration workers load (REACTQ_TOOLS=tests.integration.tools:TOOLS).

Each records where and when it ran in Redis (``reactq-test:toolruns``), so tests can show
that calls of one turn ran concurrently on different worker processes, and how many
times each call ran.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import time

import redis
from pydantic import BaseModel, Field

from reactq.shared.hooks import Hook, HookContext, HookPoint, HookResult
from reactq.shared.redisconn import client as state_client
from reactq.shared.settings import Settings
from reactq.shared.tools.base import Tool


def _record(tag: str, started: float) -> None:
    url = os.environ.get("REACTQ_REDIS_URL")
    if not url:
        return
    r = state_client(Settings())  # a cluster client in the cluster tier
    r.rpush("reactq-test:toolruns", json.dumps({
        "tag": tag, "pid": os.getpid(), "host": socket.gethostname(),
        "started": started, "ended": time.time(),
    }))


class SlowArgs(BaseModel):
    tag: str = Field(description="a label recorded with the run")
    seconds: float = Field(0.5, ge=0, le=30)


def _slow(tag: str, seconds: float = 0.5) -> str:
    started = time.time()
    time.sleep(seconds)
    _record(tag, started)
    return f"slow {tag} done"


def _once(tag: str, seconds: float = 0.5) -> str:
    started = time.time()
    time.sleep(seconds)
    _record(tag, started)
    return f"once {tag} done"


# In the worker, not a tool-runner: the ``pid`` it records is then its worker's, which is
# what the fan-out and partition tests compare (it sleeps: the GIL is free meanwhile).
slow = Tool(name="slow", description="Sleeps, then reports (records where it ran).",
            args_model=SlowArgs, fn=_slow, isolate=False)
once = Tool(name="charge_card", description="A non-idempotent action (records each run).",
            args_model=SlowArgs, fn=_once, idempotent=False)

class HoldArgs(BaseModel):
    tag: str = Field(description="a label recorded with the run")
    seconds: int = Field(1, ge=0, le=120)


def _hold_gil(tag: str, seconds: int = 1) -> str:
    """Hold the GIL for ``seconds`` in one C call: libc ``sleep`` called through
    ``ctypes.PyDLL``, which (unlike ``CDLL``) does not release the GIL. Its effect on the
    process is that of a long C loop or a big regex, without burning a CPU on a shared box.
    Each start is recorded (``reactq-test:toolstarts``) before the hold, each completion after."""
    started = time.time()
    url = os.environ.get("REACTQ_REDIS_URL")
    if url:
        redis.Redis.from_url(url).rpush("reactq-test:toolstarts", json.dumps(
            {"tag": tag, "pid": os.getpid(), "ppid": os.getppid(), "started": started}))
    ctypes.PyDLL(None).sleep(seconds)
    _record(tag, started)
    return f"held the GIL {seconds}s ({tag})"


hold_gil = Tool(name="hold_gil", description="Holds the GIL (non-idempotent, records each run).",
                args_model=HoldArgs, fn=_hold_gil, idempotent=False)
hold_gil_retry = Tool(name="hold_gil_retry", description="Holds the GIL (idempotent).",
                      args_model=HoldArgs, fn=_hold_gil)
hold_gil_2s = Tool(name="hold_gil_2s", description="Holds the GIL; its deadline is 2 s.",
                   args_model=HoldArgs, fn=_hold_gil, timeout=2)

class DieArgs(BaseModel):
    reason: str = Field("", description="why")


def _die(reason: str = "") -> str:
    """A poison pill: kills the process that runs it (kill -9 of its worker)."""
    import signal

    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


die = Tool(name="die", description="Kills its worker (tests of the crash limit).",
           args_model=DieArgs, fn=_die, isolate=False)  # kill the worker, not a tool-runner



class TransferArgs(BaseModel):
    tag: str = Field(description="a label recorded with the run")
    amount: int = Field(1, ge=0)
    seconds: float = Field(0, ge=0, le=10)


def _transfer(tag: str, amount: int = 1, seconds: float = 0) -> str:
    started = time.time()
    time.sleep(seconds)
    _record(tag, started)
    return f"moved {amount} ({tag})"


# Approvals: a non-idempotent action a person must approve (each run is recorded).
transfer = Tool(name="transfer", description="Moves money (needs a person's approval).",
                args_model=TransferArgs, fn=_transfer, idempotent=False, isolate=False,
                requires_approval=True)

# default_registry adds these to the built-in tools.
TOOLS = [slow, once, hold_gil, hold_gil_retry, hold_gil_2s, transfer]

class PingArgs(BaseModel):
    tag: str = Field("", description="a label")


def _ping(tag: str = "") -> str:
    return f"pong {tag}".strip()


# A connector-style name (``server__tool``, as MCP tools are named): the built-in rate limiter's.
conn_ping = Tool(name="conn__ping", description="A connector tool: answers pong.", args_model=PingArgs,
                 fn=_ping, isolate=False)
#: The rate limiter's tests load these.
CONNECTOR_TOOLS = [*TOOLS, conn_ping]
# The crash-limit tests load these (``die`` kills its worker; kept out of TOOLS so that the
# other tests' catalogs stay under the tool-selection threshold).
CRASH_TOOLS = [*TOOLS, die]


async def _ask_for_big_tags(ctx: HookContext) -> HookResult:
    """Asks a person before ``slow`` runs with a tag that starts with ``ask``."""
    if str((ctx.tool_args or {}).get("tag", "")).startswith("ask"):
        return HookResult(ask=True, reason="a tag that starts with 'ask' needs a person")
    return HookResult()


# The approval tests' workers load these (REACTQ_HOOKS): a PreToolUse hook that asks.
ASK_HOOKS = [Hook(name="ask_for_big_tags", hook_point=HookPoint.PRE_TOOL_USE, handler=_ask_for_big_tags,
                  tool_filter="slow")]
