"""Redis round trips per step (issue 12, item 1), counted, never timed.

A 3-turn run (LLM → ``echo``, LLM → ``echo``, LLM → answer) is driven through the very task
bodies a Celery worker runs (``reactq.workers.runs.tasks``), in this process, against the real
Redis and the scripted LLM; what a task sends (``send``) is queued here and run next instead
of going through the broker. The worker's Redis client counts what its connections send: one
command, one pipeline or one script call is one round trip. Background threads (the lease
heartbeat) are not a step's and are left out.

A turn is the tool task and the ``iterate`` that takes the fan-in and makes the next LLM
call: ``open`` the call with its lease (1) and ``close`` it with the lease's release (1);
the lease with the step's load and the pause of the model the worker called last, which is
the next turn's whole flow admission for a model without limits (1), the fan-in's commit with
the next turn's live ``thinking start`` (1), the read after the LLM call (1) and the turn's
commit with the lease's release (1). Six, where there were 27.5 (``bench/rtt.py``).
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from typing import Any

import pytest
import redis

from reactq.shared.requests import RunRequest
from reactq.shared.settings import Settings
from reactq.shared.wire import ANSWER, ITERATE, TOOL
from tests.integration.conftest import LLMFixture
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = pytest.mark.integration

TOOL_TASK = 2
FAN_IN_AND_TURN = 4

_counts: Counter[str] = Counter()
_now = threading.local()


class CountingConnection(redis.Connection):
    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if threading.current_thread().name != "reactq-lease-heartbeat":
            _counts[getattr(_now, "task", "-")] += 1
        super().send_packed_command(command, check_health)


def _runtime(redis_url: str, llm: LLMFixture) -> Any:
    from reactq.workers.runtime import Runtime

    rt = Runtime(Settings(redis_url=redis_url, model="scripted", models=None, demo_tools=True,
                          key_prefix=f"rtt{uuid.uuid4().hex[:6]}:", openai_api_key="k",
                          openai_base_url=llm.server.base_url))
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=CountingConnection)
    rt.__dict__["redis"] = redis.Redis(connection_pool=pool)  # before anything built on it
    return rt


def test_a_turn_makes_six_round_trips(redis_url: str, llm: LLMFixture, backend: Any,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    if backend.kind == "cluster":
        pytest.skip("a cluster splits what one server takes in one round trip")
    from reactq.workers.runs import tasks

    monkeypatch.delenv("REACTQ_MODELS", raising=False)  # the scripted model only
    rt = _runtime(redis_url, llm)
    queue: list[tuple[str, list[Any]]] = []
    monkeypatch.setattr(tasks, "runtime", lambda: rt)
    monkeypatch.setattr(tasks, "send", lambda name, args, _queue: queue.append((name, args)))
    q = llm.script(llm.unique("round trips"), [
        reply_tool_calls([("c1", "echo", {"text": "one"})]),
        reply_tool_calls([("c2", "echo", {"text": "two"})]),
        reply_text("the loop's answer"),
    ], synthesis=reply_text("synthesized"))
    run_id = uuid.uuid4().hex
    rt.store.create(run_id, RunRequest(query=q, tools=["echo"], completion_check=False).model_dump(mode="json"))
    queue.append((ITERATE, [run_id, 0]))
    bodies = {ITERATE: tasks.iterate, TOOL: tasks.tool, ANSWER: tasks.answer}
    done: list[str] = []
    _counts.clear()
    try:
        while queue:
            name, args = queue.pop(0)
            _now.task = f"{len(done)}:{name.removeprefix('reactq.')}"
            bodies[name](*args)
            done.append(_now.task)
            _now.task = "-"
    finally:
        loop = getattr(rt._local, "loop", None)  # this thread's event loop, as a worker's
        if loop is not None:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    assert rt.store.status(run_id)["status"] == "succeeded"
    events = [e for _, e in rt.store.read_events(run_id)]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1].channel == "done" and events[-1].data["answer"] == "synthesized"
    assert done == ["0:iterate", "1:tool", "2:iterate", "3:tool", "4:iterate", "5:answer"]
    print("\nround trips by task:", {t: _counts[t] for t in done})
    # The second turn is a whole one: its tool task, then the fan-in and the next LLM call.
    assert _counts["3:tool"] == TOOL_TASK
    assert _counts["4:iterate"] == FAN_IN_AND_TURN
    assert _counts["1:tool"] == TOOL_TASK and _counts["2:iterate"] == FAN_IN_AND_TURN
