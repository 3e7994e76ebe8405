"""The scripted LLM the benchmarks run against (``--script bench.script:handler``).

Stateless: the scenario is written in the run's query, as ``key=value`` words, and the
reply is chosen by the number of assistant messages already in the history, so a
redelivered call gets the same reply and one server serves every figure at once.

    bench turns=3 calls=1 tool=echo sleep=0.2 delay=0 chunks=4 chunk_delay=0

* ``turns``: LLM loop turns of the run. Turns 1 … turns-1 answer with ``calls`` tool calls
  of ``tool`` (``echo``: returns at once; ``sleep``: ``sleep`` seconds; ``spin``: burns
  ``sleep`` seconds of CPU), the last turn answers in plain text (the final answer).
* ``delay``: seconds the server waits before answering a loop turn (``asyncio.sleep``, so
  a thousand held requests cost nothing). Default: ``$BENCH_LLM_DELAY`` or 0.
* ``chunks`` / ``chunk_delay`` / ``synth_delay``: the streamed answer synthesis (number of
  8-character chunks, seconds between chunks, seconds before the first one).
* ``fail_at``: the loop turn (1, 2, …) whose LLM call is refused (HTTP 400) while the scenario's
  outage is on (``outage_path(tag)`` exists: ``bench.fork``'s P11 turns it on and off).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

from tests.scripted_server import (
    Reply,
    count_assistant_messages,
    first_user_text,
    reply_error,
    reply_text,
    reply_tool_calls,
)


@dataclass(frozen=True)
class Scenario:
    turns: int = 3
    calls: int = 1
    tool: str = "echo"
    sleep: float = 0.0
    delay: float = float(os.environ.get("BENCH_LLM_DELAY", "0") or 0)
    chunks: int = 4
    chunk_delay: float = 0.0
    synth_delay: float = 0.0
    tag: str = ""
    fail_at: int = 0

    def query(self) -> str:
        """The run's query, which carries the scenario to the scripted server."""
        words = [f"{f.name}={getattr(self, f.name)}" for f in fields(self)
                 if getattr(self, f.name) != f.default or f.name in ("turns", "calls", "tool")]
        return "bench " + " ".join(words)

    def tool_args(self, n: int, i: int) -> dict[str, Any]:
        if self.tool == "echo":
            return {"text": f"t{n}.{i}"}
        if self.tool in ("tally", "charge"):
            return {"tag": f"{self.tag}.{n}.{i}"}
        return {"seconds": self.sleep}


def parse(query: str) -> Scenario:
    values: dict[str, Any] = {}
    types = {f.name: f.type for f in fields(Scenario)}
    for word in query.split():
        key, sep, raw = word.partition("=")
        if sep and key in types:
            kind = {"int": int, "float": float}.get(str(types[key]), str)
            values[key] = kind(raw)
    return Scenario(**values)


def handler(request: dict[str, Any]) -> Reply:
    sc = parse(first_user_text(request))
    if request.get("stream"):
        text = "".join(f"part{k:03d} " for k in range(max(1, sc.chunks)))  # 8 chars a chunk
        return reply_text(text, chunk_chars=8, chunk_delay=sc.chunk_delay, delay=sc.synth_delay)
    n = count_assistant_messages(request)
    if sc.fail_at and n == sc.fail_at - 1 and os.path.exists(outage_path(sc.tag)):
        # Refused at once (400 is not retried): a 5xx would add the client's retries before
        # the run fails, which changes nothing of what re-running it costs.
        return reply_error(400, {"error": {"message": "bench outage", "type": "invalid_request_error"}})
    if n < sc.turns - 1:
        calls = [(f"c{n}_{i}", sc.tool, sc.tool_args(n, i)) for i in range(sc.calls)]
        return reply_tool_calls(calls, delay=sc.delay)
    return reply_text(f"final answer after {n} tool turns", delay=sc.delay)


def outage_path(tag: str) -> str:
    """While this file exists, a ``fail_at`` scenario with this tag fails at that turn."""
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"reactq-bench-outage-{tag}")
