"""Threads and double texting on real workers (DESIGN "Threads and double texting", issue 17):
history across runs, the five strategies with a message sent mid-tool, racing submitters,
the HTTP and CLI doors. Crash and repair paths: ``test_threads_recovery.py``.

Every LLM request of every test here is also checked by the autouse pairing validator in
``conftest.py``: no assistant tool call without its result, in any strategy.
"""

from __future__ import annotations

import threading
from itertools import pairwise
import time
from typing import Any

import pytest

from reactq.dispatcher.client import Dispatcher
from reactq.dispatcher.threads import ThreadBusy, thread_view
from reactq.shared.engine import prompts as P
from reactq.shared.requests import RunRequest
from tests.integration.thread_kit import (
    first_run_mid_tool,
    first_turn,
    loop_requests,
    mid_tool,
    new_tid,
    run_events,
    settings_for,
    submit,
    synthesis_requests,
    tool_end,
    wait,
)
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = pytest.mark.integration


# ----------------------------------------------------------------------------- history


def test_a_second_question_on_a_thread_is_answered_from_the_first(workers, dispatcher, llm):
    """The second run starts from the first run's query and answer (not its tool trace); its
    synthesis gets the seed's "Previous conversation" block; the thread lists both runs."""
    tid = new_tid()
    q1 = llm.script(llm.unique("my parcel number is 17*23, work it out"), [
        reply_tool_calls([("c1", "calculator", {"expression": "17*23"})]),
        reply_text("It is 391."),
    ], synthesis=reply_text("Your parcel number is 391."))
    q2 = llm.script(llm.unique("and what was my parcel number plus one?"), [
        reply_text("391 + 1 = 392"),
    ], synthesis=reply_text("392"))
    h1 = submit(dispatcher, q1, tid)
    assert h1.result(timeout=30)["answer"] == "Your parcel number is 391."
    h2 = submit(dispatcher, q2, tid)
    assert h2.created and h2.run_id != h1.run_id
    assert h2.result(timeout=30)["answer"] == "392"

    turn = first_turn(llm, q2)
    roles = [(m["role"], m.get("content")) for m in turn["messages"][1:]]
    assert roles == [("user", q1), ("assistant", "Your parcel number is 391."), ("user", q2)], \
        "the thread's history is the earlier query and final answer, no tool messages"
    (synth,) = synthesis_requests(llm, q2)
    text = synth["messages"][-1]["content"]
    assert f"Previous conversation:\nUser: {q1}\nAssistant: Your parcel number is 391.\n\nCurrent request: {q2}" in text

    view = thread_view(dispatcher, tid)
    assert view["active_run"] is None
    assert [(r["run_id"], r["status"], r["query"]) for r in view["runs"]] == [
        (h1.run_id, "succeeded", q1), (h2.run_id, "succeeded", q2)]
    assert [m["role"] for m in view["messages"]] == ["user", "assistant"] * 2
    ttl = dispatcher.redis.ttl(dispatcher.keys.thread(tid))
    assert 0 < ttl <= dispatcher.settings.run_ttl_seconds, "an idle thread expires like a run"
    assert "{" + tid + "}" in dispatcher.keys.thread_history(tid), "literal-brace hash tag"


# ----------------------------------------------------------------------------- strategies


def test_inject_puts_the_message_into_the_active_run(workers, dispatcher, llm):
    tid = new_tid()
    q1, h1 = first_run_mid_tool(dispatcher, llm, tid, seconds=1.5)
    q2 = llm.unique("also check the other thing")
    retry = RunRequest(query=q2, thread_id=tid, idempotency_key=f"inject-{tid}")
    h2 = dispatcher.submit(retry)
    assert h2.injected and h2.run_id == h1.run_id and h2.interrupt_id
    again = dispatcher.submit(retry)
    assert (again.run_id, again.injected, again.created) == (h1.run_id, False, False), "a retry injects nothing"
    events = run_events(dispatcher, h1.run_id)
    assert h1.result(timeout=30)["status"] == "succeeded"
    injects = [e.data for e in events if e.channel == "inject"]
    assert [(i["content"], i["id"]) for i in injects] == [(q2, h2.interrupt_id)]
    second = [b for b in loop_requests(llm, q1) if any(m["role"] == "tool" for m in b["messages"])]
    msgs = second[0]["messages"]
    tool_at = next(i for i, m in enumerate(msgs) if m["role"] == "tool")
    assert msgs[tool_at + 1]["content"].startswith(f"[USER INTERRUPT]: {q2}"), \
        "the follow-up comes right after the tool result, never between call and result"
    view = thread_view(dispatcher, tid)
    assert [r["run_id"] for r in view["runs"]] == [h1.run_id], "no run was made"
    assert q2 in view["messages"][0]["content"], "the injected follow-up is part of the turn"


def test_enqueue_starts_the_next_run_when_the_active_one_ends(workers, dispatcher, llm):
    tid = new_tid()
    q1, h1 = first_run_mid_tool(dispatcher, llm, tid, seconds=1.5)
    q2 = llm.script(llm.unique("then do the second thing"), [reply_text("second done")],
                    synthesis=reply_text("second answer"))
    q3 = llm.script(llm.unique("and the third thing"), [reply_text("third done")],
                    synthesis=reply_text("third answer"))
    h2 = submit(dispatcher, q2, tid, "enqueue")
    h3 = submit(dispatcher, q3, tid, "enqueue")
    assert h2.created and not h2.injected
    assert h2.status()["status"] == "queued" and h3.status()["status"] == "queued"
    assert thread_view(dispatcher, tid)["active_run"] == h1.run_id
    r1, r2, r3 = h1.result(timeout=30), h2.result(timeout=30), h3.result(timeout=30)
    assert (r1["status"], r2["status"], r3["status"]) == ("succeeded",) * 3
    s1 = dispatcher.store.load(h1.run_id).state
    s2 = dispatcher.store.load(h2.run_id).state
    assert s2.started_at >= s1.ended_at, "the enqueued run started after the active one ended"
    first_of_2 = first_turn(llm, q2)
    assert [m.get("content") for m in first_of_2["messages"][1:]] == [q1, "first answer", q2]
    first_of_3 = first_turn(llm, q3)
    assert [m.get("content") for m in first_of_3["messages"][1:]] == [
        q1, "first answer", q2, "second answer", q3], "FIFO, each with the answers before it"


def test_reject_refuses_while_the_thread_is_busy(workers, dispatcher, llm):
    tid = new_tid()
    _, h1 = first_run_mid_tool(dispatcher, llm, tid, seconds=1.0)
    with pytest.raises(ThreadBusy) as err:
        submit(dispatcher, llm.unique("not now"), tid, "reject")
    assert err.value.active_run == h1.run_id and h1.run_id in str(err.value)
    assert h1.result(timeout=30)["status"] == "succeeded"
    assert [r["run_id"] for r in thread_view(dispatcher, tid)["runs"]] == [h1.run_id], "nothing enqueued"


@pytest.mark.parametrize("strategy", ["interrupt", "rollback"])
def test_interrupt_and_rollback_stop_the_active_run_mid_tool(strategy, workers, dispatcher, llm):
    tid = new_tid()
    q1, h1 = first_run_mid_tool(dispatcher, llm, tid, seconds=4.0)
    q2 = llm.script(llm.unique(f"forget that, {strategy} please"), [reply_text("ok")],
                    synthesis=reply_text("new answer"))
    h2 = submit(dispatcher, q2, tid, strategy)
    assert h2.created
    events = run_events(dispatcher, h1.run_id)
    r1 = h1.result(timeout=30)
    assert r1["status"] == "cancelled"
    tool_ended = wait(lambda: tool_end(dispatcher, f"first-{tid}"), what="the slow tool to finish")
    assert dispatcher.store.load(h1.run_id).state.ended_at < tool_ended, \
        "the run stopped at the next step boundary, without waiting for its tool"
    error = next(e.data for e in events if e.channel == "error")
    assert (error["kind"], error["strategy"]) == ("interrupted", strategy)
    assert events[-1].channel == "done" and events[-1].data["status"] == "cancelled"
    # The stopped run's own history is valid: its open call is answered as *interrupted*.
    s1 = dispatcher.store.load(h1.run_id).state
    tool_msgs = [m for m in s1.messages if m.role == "tool"]
    assert [(m.tool_call_id, m.content) for m in tool_msgs] == [("s1", P.INTERRUPTED_OBSERVATION)]
    assert not any(s.tool_call_id == "s1" for s in s1.steps), "not recorded as run"

    assert h2.result(timeout=30)["answer"] == "new answer"
    first_of_2 = first_turn(llm, q2)
    history = [(m["role"], m.get("content")) for m in first_of_2["messages"][1:-1]]
    if strategy == "interrupt":
        assert history[0] == ("user", q1)
        assert history[1][0] == "assistant" and "interrupted" in history[1][1] and "slow" in history[1][1]
    else:
        assert history == [], "rollback leaves nothing of the stopped run"
    view = thread_view(dispatcher, tid)
    assert [(r["run_id"], r["status"]) for r in view["runs"]] == [(h1.run_id, "cancelled"),
                                                                  (h2.run_id, "succeeded")]


# ----------------------------------------------------------------------------- races


@pytest.mark.parametrize("strategy", ["inject", "reject"])
def test_two_clients_racing_on_one_thread_get_one_active_run(strategy, workers, settings, llm):
    q = llm.script(llm.unique("race"), [reply_text("won", delay=1.0)], synthesis=reply_text("raced"))
    for _ in range(3):
        tid = new_tid()
        clients = [Dispatcher(settings), Dispatcher(settings)]
        for c in clients:
            c.catalog()  # warm: both submit at the barrier
        barrier = threading.Barrier(2)
        outcomes: list[Any] = [None, None]

        def go(i: int, barrier: threading.Barrier = barrier, outcomes: list[Any] = outcomes,
               clients: list[Dispatcher] = clients, tid: str = tid) -> None:
            barrier.wait()
            try:
                outcomes[i] = submit(clients[i], q, tid, strategy)
            except ThreadBusy as exc:
                outcomes[i] = exc

        ts = [threading.Thread(target=go, args=(i,)) for i in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(20)
        created = [o for o in outcomes if not isinstance(o, ThreadBusy) and o.created]
        assert len(created) == 1, outcomes
        other = next(o for o in outcomes if o is not created[0])
        if strategy == "inject":
            assert other.injected and other.run_id == created[0].run_id
        else:
            assert isinstance(other, ThreadBusy) and other.active_run == created[0].run_id
        assert [r["run_id"] for r in thread_view(clients[0], tid)["runs"]] == [created[0].run_id]
        assert created[0].result(timeout=30)["status"] == "succeeded"


def test_racing_enqueues_run_one_at_a_time_each_from_the_ones_before(workers, settings, llm):
    """Five clients enqueue on one idle thread at once: one starts, four wait; no two runs of
    the thread ever overlap, and each starts from every answer before it."""
    tid = new_tid()
    queries = [llm.script(llm.unique(f"enqueue race {i}"), [reply_text(f"r{i}", delay=0.3)],
                          synthesis=reply_text(f"answer {i}")) for i in range(5)]
    clients = [Dispatcher(settings) for _ in queries]
    for c in clients:
        c.catalog()
    barrier = threading.Barrier(len(queries))
    handles: list[Any] = [None] * len(queries)

    def go(i: int) -> None:
        barrier.wait()
        handles[i] = submit(clients[i], queries[i], tid, "enqueue")

    ts = [threading.Thread(target=go, args=(i,)) for i in range(len(queries))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(20)
    assert all(h is not None and h.created for h in handles)
    for h in handles:
        assert h.result(timeout=60)["status"] == "succeeded"
    states = sorted((clients[0].store.load(h.run_id).state for h in handles), key=lambda s: s.started_at)
    for before, after in pairwise(states):
        assert after.started_at >= before.ended_at, "two runs of one thread overlapped"
    for n, state in enumerate(states):
        assert len(state.history) == 2 * n, "each run starts from every answer before it"


# ----------------------------------------------------------------------------- HTTP


def test_http_thread_routes(workers, redis_url, llm, tmp_path):
    import httpx2

    from tests.integration.conftest import worker_env
    from tests.integration.test_gateway import start_gateway, stop_gateway

    gw = start_gateway(worker_env(redis_url, llm), tmp_path / "gw.log", via_cli=False)
    try:
        tid = new_tid()
        q1 = llm.script(llm.unique("http thread first"), [
            reply_tool_calls([("h1", "slow", {"tag": "http-thread", "seconds": 1.5})]),
            reply_text("done")], synthesis=reply_text("http first answer"))
        c = httpx2.Client(base_url=gw.url, timeout=10)
        first = c.post("/v1/runs", json={"query": q1, "thread_id": tid, "completion_check": False})
        assert first.status_code == 202
        rid = first.json()["run_id"]
        d = Dispatcher(settings_for(redis_url, llm))
        mid_tool(d, rid)
        busy = c.post("/v1/runs", json={"query": "x", "thread_id": tid, "multitask_strategy": "reject"})
        err = busy.json()["error"]
        assert busy.status_code == 409 and err["details"][0]["active_run"] == rid and rid in err["message"]
        inj = c.post("/v1/runs", json={"query": "and this", "thread_id": tid})
        assert inj.status_code == 202
        assert inj.json()["run_id"] == rid and inj.json()["injected"] is True and inj.json()["interrupt_id"]
        bad = c.post("/v1/runs", json={"query": "x", "thread_id": "no{braces}"})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "thread_id"
        bad = c.post("/v1/runs", json={"query": "x", "thread_id": tid, "multitask_strategy": "later"})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "multitask_strategy"
        d.handle(rid).result(timeout=30)
        view = c.get(f"/v1/threads/{tid}").json()
        assert view["thread_id"] == tid and view["active_run"] is None
        assert [(r["run_id"], r["status"], r["query"]) for r in view["runs"]] == [(rid, "succeeded", q1)]
        assert set(view["runs"][0]) == {"run_id", "status", "query", "created_at"}
        assert c.get("/v1/threads/never-used").status_code == 404
        assert c.get("/v1/threads/bad{id}").status_code == 422
    finally:
        stop_gateway(gw)


# ----------------------------------------------------------------------------- kill -9


def test_a_message_injected_too_late_for_the_answer_becomes_the_next_run(workers, dispatcher, llm):
    """``inject`` while the active run already streams its answer: the seed's run cannot read
    it (``pending_injections``), so the thread runs it next, with that answer in its history."""
    tid = new_tid()
    q1 = llm.script(llm.unique("answer slowly"), [reply_text("draft")],
                    synthesis=reply_text("a long first answer", chunk_delay=0.3))
    h1 = submit(dispatcher, q1, tid)

    def streaming() -> bool:
        return any(e.channel == "answer" and e.data.get("status") == "delta"
                   for _, e in dispatcher.handle(h1.run_id).events(until_done=False, block_ms=100))
    wait(streaming, what="the answer to stream")
    late = llm.script(llm.unique("one more thing"), [reply_text("late ok")], synthesis=reply_text("late answer"))
    h2 = submit(dispatcher, late, tid, "inject")
    assert h2.injected and h2.run_id == h1.run_id
    events = run_events(dispatcher, h1.run_id)
    assert events[-1].data.get("pending_injections") == [late]
    nxt = wait(lambda: len(thread_view(dispatcher, tid)["runs"]) == 2 and thread_view(dispatcher, tid)["runs"][1],
                what="the follow-up run")
    assert nxt["query"] == late
    assert dispatcher.handle(nxt["run_id"]).result(timeout=30)["answer"] == "late answer"
    assert [m.get("content") for m in first_turn(llm, late)["messages"][1:]] == [
        q1, "a long first answer", late]


# ----------------------------------------------------------------------------- CLI


def test_cli_run_on_a_thread_then_show_it(redis_url, llm, workers):
    import json
    import subprocess
    import sys

    from tests.integration.conftest import ROOT, worker_env

    env = worker_env(redis_url, llm, COLUMNS="120")

    def reactq(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "dispatcher", *args], cwd=ROOT, env=env, text=True,
                              capture_output=True, stdin=subprocess.DEVNULL, timeout=60, check=False)

    tid = new_tid()
    q1 = llm.script(llm.unique("cli thread: remember 42"), [reply_text("ok")], synthesis=reply_text("Remembered 42."))
    q2 = llm.script(llm.unique("cli thread: what did I ask you to remember?"), [reply_text("42")],
                    synthesis=reply_text("You asked me to remember 42."))
    assert reactq("run", q1, "--thread", tid, "--json", "--no-completion-check").returncode == 0
    second = reactq("run", q2, "--thread", tid, "--strategy", "reject", "--json")
    assert second.returncode == 0, second.stderr
    assert [m.get("content") for m in first_turn(llm, q2)["messages"][1:]] == [q1, "Remembered 42.", q2]
    shown = reactq("thread", tid, "--json")
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert [r["query"] for r in view["runs"]] == [q1, q2] and view["active_run"] is None
    from reactq.dispatcher.cli import app
    from typer.testing import CliRunner

    def in_process(*args: str) -> Any:
        return CliRunner().invoke(app, list(args), env=env)

    pretty = in_process("thread", tid)
    assert pretty.exit_code == 0 and "Remembered 42." in pretty.output and "succeeded" in pretty.output
    assert in_process("thread", "no{such}").exit_code == 2
    assert in_process("thread", new_tid()).exit_code == 2  # not found: usage, as for a run
    bad = in_process("run", "q", "--thread", "sp ace")
    assert bad.exit_code == 2 and "thread_id" in bad.output
    assert in_process("run", "q", "--thread", tid, "--local").exit_code == 2


def test_an_interrupt_during_the_llm_call_sends_none_of_its_tool_calls(workers, dispatcher, llm):
    """The LLM was thinking when the interrupt came; the calls its reply makes are answered
    as interrupted and never run (no duplicate side effects after the user changed course)."""
    tid = new_tid()
    q1 = llm.script(llm.unique("think, then charge the card"), [
        reply_tool_calls([("p1", "charge_card", {"tag": f"never-{tid}", "seconds": 0.1})], delay=2.0),
        reply_text("charged")], synthesis=reply_text("never"))
    h1 = submit(dispatcher, q1, tid)
    wait(lambda: loop_requests(llm, q1), what="the LLM call")
    q2 = llm.script(llm.unique("no, do not charge"), [reply_text("ok")], synthesis=reply_text("not charged"))
    h2 = submit(dispatcher, q2, tid, "interrupt")
    assert h1.result(timeout=30)["status"] == "cancelled"
    assert h2.result(timeout=30)["answer"] == "not charged"
    s1 = dispatcher.store.load(h1.run_id).state
    # The stop aborts the LLM call in flight (issue 10, cancel within 1 s), so usually its
    # reply never arrives; if it did, its call is answered as interrupted. Never run either way.
    tool_msgs = [(m.tool_call_id, m.content) for m in s1.messages if m.role == "tool"]
    assert tool_msgs in ([], [("p1", P.INTERRUPTED_OBSERVATION)])
    time.sleep(1.0)
    assert tool_end(dispatcher, f"never-{tid}") is None, "the tool never ran"
    if tool_msgs:
        assert "charge_card" in thread_view(dispatcher, tid)["messages"][1]["content"]


@pytest.mark.parametrize("ending", ["cancelled", "failed"])
def test_a_run_that_is_cancelled_or_fails_hands_the_thread_on(ending, workers, dispatcher, llm):
    """"A run that ends for any reason releases the thread and starts the next enqueued run";
    its turn stays in the history as a note, so the next run knows it was not answered."""
    from tests.scripted_server import reply_error

    tid = new_tid()
    if ending == "cancelled":
        q1, h1 = first_run_mid_tool(dispatcher, llm, tid, seconds=3.0)
    else:
        q1 = llm.script(llm.unique("this one fails"), [
            reply_error(400, {"error": {"message": "bad request"}}, delay=1.0)])
        h1 = submit(dispatcher, q1, tid)
    q2 = llm.script(llm.unique(f"after the {ending} one"), [reply_text("fine")], synthesis=reply_text("next"))
    h2 = submit(dispatcher, q2, tid, "enqueue")
    if ending == "cancelled":
        h1.cancel()
    assert h1.result(timeout=30)["status"] == ending
    assert h2.result(timeout=30)["answer"] == "next"
    history = [(m["role"], m.get("content")) for m in first_turn(llm, q2)["messages"][1:-1]]
    assert history[0] == ("user", q1)
    assert history[1][0] == "assistant" and ending in history[1][1]
