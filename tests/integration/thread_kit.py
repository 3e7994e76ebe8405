"""Helpers of the thread integration tests (``test_threads*.py``)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from reactq.dispatcher.client import Dispatcher
from reactq.shared.requests import RunRequest
from tests.scripted_server import reply_text, reply_tool_calls


def new_tid() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def wait(predicate: Any, timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def submit(d: Dispatcher, q: str, tid: str, strategy: str = "inject") -> Any:
    return d.submit(RunRequest(query=q, thread_id=tid, multitask_strategy=strategy,
                               completion_check=False))


def run_events(d: Dispatcher, run_id: str) -> list[Any]:
    return [e for _, e in d.handle(run_id).events(timeout=60)]


def loop_requests(llm: Any, query: str) -> list[dict[str, Any]]:
    """Non-streamed (loop) requests whose last registered-looking user turn is ``query``."""
    out = []
    for rec in llm.server.requests:
        body = rec.body
        if body.get("stream"):
            continue
        users = [m for m in body["messages"] if m.get("role") == "user" and isinstance(m.get("content"), str)]
        if any(m["content"] == query for m in users):
            out.append(body)
    return out


def first_turn(llm: Any, query: str) -> dict[str, Any]:
    """The run's first loop request: the one that ends with ``query`` itself."""
    (body,) = [b for b in loop_requests(llm, query) if b["messages"][-1].get("content") == query]
    return body


def synthesis_requests(llm: Any, query: str) -> list[dict[str, Any]]:
    return [r.body for r in llm.server.requests if r.body.get("stream")
            and query in r.body["messages"][-1]["content"]]


def mid_tool(d: Dispatcher, run_id: str) -> None:
    """Wait until the run's tool call has started (its ``iteration start`` event)."""
    def started() -> bool:
        return any(e.channel == "step" and e.data.get("type") == "iteration" and e.data.get("status") == "start"
                   for _, e in d.handle(run_id).events(until_done=False, block_ms=100))
    wait(started, what="the tool call to start")


def first_run_mid_tool(dispatcher: Dispatcher, llm: Any, tid: str, seconds: float = 3.0) -> tuple[str, Any]:
    q1 = llm.script(llm.unique("look this up slowly"), [
        reply_tool_calls([("s1", "slow", {"tag": f"first-{tid}", "seconds": seconds})]),
        reply_text("looked it up"),
    ], synthesis=reply_text("first answer"))
    h1 = submit(dispatcher, q1, tid)
    mid_tool(dispatcher, h1.run_id)
    return q1, h1


def tool_end(d: Dispatcher, tag: str) -> float | None:
    for raw in d.redis.lrange("reactq-test:toolruns", 0, -1):
        rec = json.loads(raw)
        if rec["tag"] == tag:
            return float(rec["ended"])
    return None


def settings_for(redis_url: str, llm: Any) -> Any:
    from reactq.shared.settings import Settings

    return Settings(redis_url=redis_url, model="scripted", tools="tests.integration.tools:TOOLS",
                    openai_api_key="test-key", openai_base_url=llm.server.base_url)


def ended_but_not_released(d: Dispatcher, tid: str, answer: str) -> str:
    """A thread whose active run has ended but was never released: what a worker killed
    between the run's final commit and the release leaves behind."""
    from reactq.dispatcher.threads import thread_store
    from reactq.shared.engine.state import RunState

    rid = uuid.uuid4().hex
    q = f"ghost question {rid[:6]}"
    assert thread_store(d).submit(tid, rid, "inject", q).kind == "start"
    d.store.create(rid, RunRequest(query=q, thread_id=tid).model_dump(mode="json"))
    state = RunState(run_id=rid, query=q, model="scripted", mode="native", max_iterations=5,
                     thread_id=tid, phase="done", status="succeeded", final_answer=answer)
    assert d.store.commit(rid, state, 0, [])
    return rid
