"""P1b: the in-process runner's cost per turn, and the LLM call time P1 subtracts.

Both run ``reactq.shared.inprocess.run_local`` in this process with the same tools, hooks and
context guard a worker builds (``reactq.workers.runtime.Runtime.deps_for``).
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import io
import pstats
import time
from typing import Any

from bench.report import Figure, median
from bench.script import Scenario
from reactq.shared.engine.context import ContextGuard
from reactq.shared.engine.deps import EngineDeps
from reactq.shared.hooks.loader import default_hooks
from reactq.shared.inprocess import run_local
from reactq.shared.llm.testing import FunctionLLM, text, tool_calls
from reactq.shared.models import ChatMessage, LLMResult
from reactq.shared.requests import RunRequest
from reactq.shared.settings import EngineConfig, Settings
from reactq.shared.tools.loader import default_registry


def _reply(turns: int):
    """A fake model whose own cost does not grow with the history: the turn number comes
    from the newest tool message's call id (``c{n}_0``), not from counting the history."""
    def fn(messages: list[ChatMessage], kwargs: dict[str, Any]) -> LLMResult:
        n = 0
        for m in reversed(messages[-4:]):  # a self-reflection message may follow the tool's
            if m.role == "tool" and m.tool_call_id:
                n = int(m.tool_call_id[1:].split("_")[0]) + 1
                break
        if kwargs.get("stream"):
            return text("part000 part001 part002 part003")
        if n < turns - 1:
            return tool_calls((f"c{n}_0", "echo", {"text": f"t{n}"}))
        return text(f"final answer after {n} tool turns")
    return fn


class LeanFunctionLLM(FunctionLLM):
    """``FunctionLLM`` without its call log: the log deep-copies the whole history on
    every call (a test aid, O(history) per turn), which is not the engine's cost."""

    def _reply(self, messages: list[ChatMessage], kwargs: dict[str, Any], stream: bool) -> LLMResult:
        reply = self.fn(messages, kwargs)
        return text(reply) if isinstance(reply, str) else reply


def deps_with(llm: Any, settings: Settings | None = None) -> EngineDeps:
    settings = settings or Settings(tools="bench.tools:TOOLS", demo_tools=True)
    config = EngineConfig()
    guard = ContextGuard(config.context_budget, llm=llm, max_message_chars=config.max_message_chars,
                         keep_recent=config.keep_recent)
    return EngineDeps(llm=llm, registry=default_registry(settings), hooks=default_hooks(settings),
                      config=config, guard=guard, selection_llm=llm)


async def _time_run(deps: EngineDeps, turns: int) -> tuple[float, float]:
    """(wall, CPU) seconds of one run."""
    req = RunRequest(query=Scenario(turns=turns).query(), completion_check=False)
    t, c = time.perf_counter(), time.process_time()
    state = await run_local(req, deps)
    elapsed, cpu = time.perf_counter() - t, time.process_time() - c
    assert state.status == "succeeded" and state.iteration == turns, (state.status, state.error)
    return elapsed, cpu


def per_turn_ms(llm_class: type[FunctionLLM], repeats: int, short: int = 2,
                long: int = 22) -> list[tuple[float, float]]:
    """(wall, CPU) ms per turn: (run of ``long`` turns − run of ``short``) / difference,
    each run a batch of 10 so that a sample is long enough for the CPU clock."""
    def make(turns: int) -> EngineDeps:
        return deps_with(llm_class(fn=_reply(turns), abilities={"tool_call": True}))

    async def batch(turns: int) -> tuple[float, float]:
        deps = make(turns)
        runs = [await _time_run(deps, turns) for _ in range(10)]
        return sum(r[0] for r in runs) / 10, sum(r[1] for r in runs) / 10

    async def main() -> list[tuple[float, float]]:
        out = []
        await batch(long)  # warm-up
        for _ in range(repeats):
            a, b = await batch(short), await batch(long)
            out.append(((b[0] - a[0]) / (long - short) * 1000, (b[1] - a[1]) / (long - short) * 1000))
        return out
    return asyncio.run(main())


def p1b(repeats: int, profile: bool = False) -> Figure:
    """CPU time is the figure: the runner does no I/O, so on a quiet machine wall ≈ CPU, and
    on a shared one CPU time is not inflated by other processes (wall is reported beside)."""
    samples = per_turn_ms(LeanFunctionLLM, repeats)
    stock = per_turn_ms(FunctionLLM, max(3, repeats // 2))
    details: dict[str, Any] = {
        "cpu_samples_ms": [c for _, c in samples], "wall_ms": median([w for w, _ in samples]),
        "stock_function_llm_cpu_ms": median([c for _, c in stock]),
        "method": "(run of 22 turns − run of 2 turns) / 20, 1 echo call a turn, CPU time"}
    if profile:
        details["profile_top"] = profile_run_local()
    return Figure("P1b", "in-process run_local, cost per turn (zero-latency fake LLM, 1 tool a turn)",
                  median([c for _, c in samples]), "ms", target=0.15, rule="value<=", repeats=repeats,
                  details=details)


def _batch_cpu_ms(deps_of: Any, turns: int, runs: int = 20) -> float:
    """CPU ms of one run of ``turns`` turns (the mean of a batch of ``runs``)."""
    async def batch() -> float:
        deps = deps_of(turns)
        return sum([(await _time_run(deps, turns))[1] for _ in range(runs)]) / runs * 1000
    return asyncio.run(batch())


def p1b_flat(repeats: int, span: int = 8) -> Figure:
    """P1b-flat: a turn costs the same whatever the history: the marginal turn at 20 turns
    against the marginal turn at 1 (ratio ≤ 1.2). The marginal turn at n is (run of n + 8
    turns − run of n) / 8, batches of 20 runs, the run lengths interleaved so that a noisy
    moment on a shared machine hits both figures alike; median of the pairs.

    The cyclic garbage collector is off while a batch runs (a full collection before it):
    its young-generation pass (≈ 0.2 ms) falls on fixed turns of every run (about every 23
    turns, when a run has kept ~700 new objects), so one window holds it and the other does
    not. Its cost per turn is that of the objects a turn keeps, the same at every turn; the
    figure with it on is in the details (``gc_on``)."""
    def deps_of(turns: int) -> EngineDeps:
        return deps_with(LeanFunctionLLM(fn=_reply(turns), abilities={"tool_call": True}))

    def pair(at: int, collector: bool) -> float:
        def timed(turns: int) -> float:
            gc.collect()
            if not collector:
                gc.disable()
            try:
                return _batch_cpu_ms(deps_of, turns)
            finally:
                gc.enable()
        short = timed(at)
        return (timed(at + span) - short) / span

    _batch_cpu_ms(deps_of, 20 + span)  # warm-up
    samples: dict[str, list[float]] = {"at_1_ms": [], "at_20_ms": [], "gc_on_at_1_ms": [], "gc_on_at_20_ms": []}
    for _ in range(repeats):
        samples["at_1_ms"].append(pair(1, False))
        samples["at_20_ms"].append(pair(20, False))
        samples["gc_on_at_1_ms"].append(pair(1, True))
        samples["gc_on_at_20_ms"].append(pair(20, True))
    gc_on = {"at_1_ms": median(samples["gc_on_at_1_ms"]), "at_20_ms": median(samples["gc_on_at_20_ms"])}
    return Figure("P1b-flat", "in-process: marginal turn at 20 turns vs at 1 (CPU, 1 echo call a turn)",
                  median(samples["at_20_ms"]), "ms", floor=median(samples["at_1_ms"]), target=1.2,
                  rule="ratio<=", repeats=repeats,
                  details={**samples, "gc_on": gc_on,
                           "method": f"(run of n+{span} turns − run of n turns) / {span} at n = 1 and "
                                     "n = 20, batches of 20 runs, CPU time, median of the pairs; "
                                     "cyclic GC off during a batch (on: gc_on)"})


def profile_run_local(turns: int = 22, top: int = 12) -> list[str]:
    """cProfile of a few runs: the functions with the most cumulative own time."""
    deps = deps_with(LeanFunctionLLM(fn=_reply(turns), abilities={"tool_call": True}))
    prof = cProfile.Profile()

    async def many() -> None:
        for _ in range(20):
            await _time_run(deps, turns)

    prof.enable()
    asyncio.run(many())
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    return [line.strip() for line in buf.getvalue().splitlines() if line.strip()][-top:]


def llm_call_ms(llm_url: str, turns: int = 12, calls: int = 60) -> dict[str, float]:
    """What P1 subtracts as "scripted LLM time", with the history of a ``turns``-turn run:

    * ``raw_http_ms``: a plain keep-alive HTTP POST of the very request body the engine
      sends on its last loop turn, to the scripted server (zero delay): the LLM's own time
      as seen on the wire. P1 subtracts this.
    * ``openai_chat_ms``: ``OpenAILLM.chat`` with the same messages, i.e. plus the openai
      SDK's request building and response parsing (which is reactq's cost, not the LLM's).
    """
    import http.client
    import json
    from urllib.parse import urlsplit

    from reactq.shared.llm.openai import OpenAILLM

    llm = OpenAILLM("scripted", base_url=llm_url, api_key="bench-key",
                    abilities={"tool_call": True, "json_mode": True})
    captured: dict[str, Any] = {}
    original = llm.chat

    async def capture(messages: list[ChatMessage], **kwargs: Any) -> LLMResult:
        captured["messages"], captured["kwargs"] = list(messages), kwargs
        return await original(messages, **kwargs)

    llm.chat = capture  # type: ignore[method-assign]

    async def sdk() -> float:
        await _time_run(deps_with(llm), turns)
        msgs, kw = captured["messages"], captured["kwargs"]
        for _ in range(5):
            await original(msgs, **kw)
        times = []
        for _ in range(calls):
            t = time.perf_counter()
            await original(msgs, **kw)
            times.append((time.perf_counter() - t) * 1000)
        return median(times)

    openai_ms = asyncio.run(sdk())
    body = json.dumps(llm._request(captured["messages"], **captured["kwargs"])).encode()
    url = urlsplit(llm_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    raw = []
    for i in range(calls + 5):
        t = time.perf_counter()
        conn.request("POST", f"{url.path}/chat/completions", body=body,
                     headers={"content-type": "application/json", "authorization": "Bearer bench-key"})
        resp = conn.getresponse()
        resp.read()
        if i >= 5:
            raw.append((time.perf_counter() - t) * 1000)
    conn.close()
    return {"raw_http_ms": median(raw), "openai_chat_ms": openai_ms,
            "request_bytes": len(body), "messages": len(captured["messages"])}
