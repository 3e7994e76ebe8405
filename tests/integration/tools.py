"""Tools the integration workers load (REACTQ_TOOLS=tests.integration.tools:TOOLS).

Each records where and when it ran in Redis (``reactq-test:toolruns``), so tests can show
that calls of one turn ran concurrently on different worker processes, and how many
times each call ran.
"""

from __future__ import annotations

import json
import os
import socket
import time

import redis
from pydantic import BaseModel, Field

from reactq.shared.tools.base import Tool


def _record(tag: str, started: float) -> None:
    url = os.environ.get("REACTQ_REDIS_URL")
    if not url:
        return
    r = redis.Redis.from_url(url)
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


slow = Tool(name="slow", description="Sleeps, then reports (records where it ran).",
            args_model=SlowArgs, fn=_slow)
once = Tool(name="charge_card", description="A non-idempotent action (records each run).",
            args_model=SlowArgs, fn=_once, idempotent=False)

class DieArgs(BaseModel):
    reason: str = Field("", description="why")


def _die(reason: str = "") -> str:
    """A poison pill: kills the process that runs it (kill -9 of its worker)."""
    import signal

    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


die = Tool(name="die", description="Kills its worker (tests of the crash limit).",
           args_model=DieArgs, fn=_die)

# default_registry adds these to the built-in tools.
TOOLS = [slow, once, die]
