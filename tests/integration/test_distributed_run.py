"""Distributed runs: real Celery workers, real Redis, the real openai client over HTTP."""

from __future__ import annotations

import json

import pytest

from shared.requests import RunRequest
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = pytest.mark.integration


def test_a_native_run_with_a_tool_call_succeeds_on_workers(workers, dispatcher, llm):
    """S77: a run on the workers emits the seed's event order and ends succeeded."""
    q = llm.script(llm.unique("what is 17*23?"), [
        reply_tool_calls([("c1", "calculator", {"expression": "17*23"})]),
        reply_text("17*23 = 391"),
    ], synthesis=reply_text("The answer is 391."))
    handle = dispatcher.submit(RunRequest(query=q))
    events = [e for _, e in handle.events(timeout=30)]
    result = handle.result(timeout=10)
    assert result["status"] == "succeeded"
    assert result["answer"] == "The answer is 391."
    kinds = [(e.channel, e.data.get("type"), e.data.get("status")) for e in events]
    assert kinds[:4] == [("step", "thinking", "start"), ("step", "thinking", "done"),
                         ("step", "iteration", "start"), ("step", "iteration", "done")]
    assert kinds[-1][0] == "done"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    done_iter = events[3].data
    assert done_iter["observation"] == "391"
