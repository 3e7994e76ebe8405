"""Distributed runs: real Celery workers, real Redis, the real openai client over HTTP."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from reactq.shared.keys import Keys
from reactq.shared.requests import RunRequest
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


def _normalized(events):
    """The parts of events that must match between shells (no timings, ids or usage)."""
    keep = ("type", "status", "iteration", "tool_name", "tool_call_id", "tool_args",
            "observation", "error", "content", "reasoning", "phase", "total_tools")
    out = []
    for e in events:
        d = {k: e.data[k] for k in keep if k in e.data}
        if e.channel == "done":
            d = {"answer": e.data["answer"], "iterations": e.data["iterations"],
                 "status": e.data["status"]}
        out.append((e.channel, e.seq, d))
    return out


@pytest.mark.parametrize("mode", ["native", "json"])
async def test_the_distributed_run_emits_the_same_events_as_the_in_process_runner(
        mode, workers, dispatcher, llm, settings, monkeypatch):
    """DESIGN "both shells": same script ⇒ same event sequence, in both modes."""
    from tests.integration.conftest import SELECTION_THRESHOLD

    monkeypatch.setenv("REACTQ_TOOL_SELECTION_THRESHOLD", SELECTION_THRESHOLD)  # as the workers
    from reactq.shared.engine.deps import EngineDeps
    from reactq.shared.settings import EngineConfig
    from reactq.shared.events import ListSink
    from reactq.shared.inprocess import run_local
    from reactq.shared.llm.registry import load_registry
    from reactq.shared.tools.loader import default_registry

    if mode == "native":
        turns = [reply_tool_calls([("c1", "calculator", {"expression": "2+3"}),
                                   ("c2", "echo", {"text": "hi"})], content="Looking."),
                 reply_text("5 and hi")]
    else:
        turns = [reply_text(json.dumps({"type": "tool_call", "reasoning": "compute",
                                        "tool_name": "calculator", "tool_args": {"expression": "2+3"}})),
                 reply_text(json.dumps({"type": "final_answer", "reasoning": "done", "answer": "5"}))]
    synth = reply_text("It is five, and the echo said hi.")
    q_local = llm.script(llm.unique(f"compare {mode} A"), turns, synthesis=synth)
    q_dist = q_local[:-10] + "x" + q_local[-9:]
    llm.script(q_dist, turns, synthesis=synth)

    # This test is the in-process shell's edge: it reads the engine's config from the
    # environment, as the workers do (the engine itself never reads it).
    deps = EngineDeps(llm=load_registry(settings).get_default(), registry=default_registry(settings),
                      config=EngineConfig())
    sink = ListSink()
    state = await run_local(RunRequest(query=q_local, mode=mode), deps, sink=sink)
    assert state.status == "succeeded"

    handle = dispatcher.submit(RunRequest(query=q_dist, mode=mode))
    remote = [e for _, e in handle.events(timeout=30)]
    assert _normalized(remote) == _normalized(sink.events)


@pytest.mark.core
def test_the_tool_calls_of_one_turn_run_concurrently_on_more_than_one_worker(workers, dispatcher, llm, r):
    """Issue 3: each tool call is its own task; one turn's calls overlap on several processes."""
    tags = [f"par-{i}-{llm.unique('t')[-9:-1]}" for i in range(4)]
    q = llm.script(llm.unique("fan out four slow calls"), [
        reply_tool_calls([(f"c{i}", "slow", {"tag": t, "seconds": 1.0}) for i, t in enumerate(tags)]),
        reply_text("all done"),
    ])
    handle = dispatcher.submit(RunRequest(query=q))
    assert handle.result(timeout=30)["status"] == "succeeded"
    runs = [json.loads(x) for x in r.lrange("reactq-test:toolruns", 0, -1)]
    mine = [x for x in runs if x["tag"] in tags]
    assert sorted(x["tag"] for x in mine) == sorted(tags)
    assert len({x["pid"] for x in mine}) >= 2
    # Every call overlaps another: they ran at the same time, not one after another.
    for a in mine:
        assert any(b is not a and b["started"] < a["ended"] and a["started"] < b["ended"] for b in mine)
    # The workers' ledger records the same picture.
    ledger = {k.decode(): json.loads(v) for k, v in r.hgetall(Keys().run_tools(handle.run_id)).items()}
    assert len({v["outcome"]["worker"] for v in ledger.values()}) >= 2


@pytest.mark.core
def test_interrupts_reach_the_next_llm_request_as_the_seed_specifies(workers, dispatcher, llm):
    """S54/S55 distributed: a message sent during a slow turn is drained after the tool results."""
    q = llm.script(llm.unique("interrupt me"), [
        reply_tool_calls([("c1", "slow", {"tag": "int", "seconds": 1.5})]),
        reply_text("ok, metric units"),
    ])
    handle = dispatcher.submit(RunRequest(query=q))
    for _, e in handle.events(timeout=20):
        if e.channel == "step" and e.data.get("type") == "iteration" and e.data["status"] == "start":
            handle.interrupt("use metric units")
            break
    events = [e for _, e in handle.events(timeout=30)]
    assert handle.result(timeout=10)["status"] == "succeeded"
    assert [e.data["content"] for e in events if e.channel == "inject"] == ["use metric units"]
    second = llm.requests_for(q)[1]["messages"]
    roles = [m["role"] for m in second]
    assert roles[-2:] == ["tool", "user"]
    assert second[-1]["content"].startswith("[USER INTERRUPT]: use metric units")


@pytest.mark.core
def test_cancel_ends_the_run_cancelled_with_a_valid_history(workers, dispatcher, llm):
    """Issue 3: cancel at the next step boundary; open tool calls are answered; done is last."""
    q = llm.script(llm.unique("cancel me"), [
        reply_tool_calls([("c1", "slow", {"tag": "cancel", "seconds": 2})]),
        reply_text("never"),
    ])
    handle = dispatcher.submit(RunRequest(query=q))
    for _, e in handle.events(timeout=20):
        if e.channel == "step" and e.data.get("type") == "iteration":
            handle.cancel()
            break
    events = [e for _, e in handle.events(timeout=30)]
    assert handle.result(timeout=10)["status"] == "cancelled"
    assert events[-1].channel == "done" and events[-1].data["status"] == "cancelled"
    state = dispatcher.store.load(handle.run_id).state
    assert [m.role for m in state.messages][-2:] == ["assistant", "tool"]
    assert state.messages[-1].tool_call_id == "c1"


@pytest.mark.core
def test_an_idempotency_key_submitted_twice_makes_one_run(workers, dispatcher, llm, r):
    """Issue 3: same key → same run id, enqueued once."""
    q = llm.script(llm.unique("idempotent"), [reply_text("hello")])
    key = llm.unique("key")
    a = dispatcher.submit(RunRequest(query=q, idempotency_key=key))
    b = dispatcher.submit(RunRequest(query=q, idempotency_key=key))
    assert a.run_id == b.run_id and a.created and not b.created
    assert a.result(timeout=20)["status"] == "succeeded"
    assert len(llm.requests_for(q)) == 1  # one loop turn, not two runs' worth


def test_a_pickled_message_is_refused_not_executed(workers, redis_url, r):
    """Invariant 1: the workers accept JSON only; a pickled task message is not run."""
    from celery import Celery

    run_id = "pickled-" + uuid.uuid4().hex[:8]
    sender = Celery(broker=redis_url)
    sender.conf.update(task_serializer="pickle", accept_content=["pickle", "json"])
    sender.send_task("reactq.iterate", args=[run_id, 0], queue="reactq.runs", serializer="pickle")
    deadline = time.monotonic() + 10
    logs = ""
    while time.monotonic() < deadline and "pickle" not in logs:
        time.sleep(0.2)
        logs = "".join(w.log.read_text(errors="replace") for w in workers)
    assert "ContentDisallowed" in logs or "Refusing to deserialize" in logs
    # Had it run, the task would have raised RunNotFound for this id.
    assert not any("RunNotFound" in line and run_id in line for line in logs.splitlines())
