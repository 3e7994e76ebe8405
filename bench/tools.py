"""Tools the benchmark workers load besides the built-ins (``REACTQ_TOOLS=bench.tools:TOOLS``).

``spin`` burns CPU for ``seconds`` (holding the GIL), the CPU-bound counterpart of the
built-in ``sleep``: it is what separates the threads pool from prefork. ``tally`` counts its
executions in Redis, to check that no tool call runs twice; ``charge`` is ``tally`` declared not
idempotent (what a fork must not run again).
"""

from __future__ import annotations

import time

from pydantic import BaseModel, Field

from reactq.shared.tools.base import Tool


class SpinArgs(BaseModel):
    seconds: float = Field(0.05, ge=0, le=10)


def _spin(seconds: float) -> str:
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        n += 1
    return f"spun {seconds:g}s ({n} loops)"


class TallyArgs(BaseModel):
    tag: str = Field(description="a label; each execution is counted under it")


def _tally(tag: str) -> str:
    """Count each execution in Redis (``bench:tally:{tag}``): shows duplicate executions."""
    import redis

    from reactq.shared.redisconn import redis_url
    from reactq.shared.settings import Settings

    n = redis.Redis.from_url(redis_url(Settings())).incr(f"bench:tally:{tag}")
    return f"tally {tag} = {n}"


tally = Tool(name="tally", description="Count an execution (benchmarks).", args_model=TallyArgs, fn=_tally)
# The same count, declared not idempotent (a payment, an e-mail): never silently run twice.
charge = Tool(name="charge", description="Count an execution of a non-idempotent action (benchmarks).",
              args_model=TallyArgs, fn=_tally, idempotent=False)

spin = Tool(name="spin", description="Burn CPU for a number of seconds (benchmarks).",
            args_model=SpinArgs, fn=_spin)

TOOLS = [spin, tally, charge]
