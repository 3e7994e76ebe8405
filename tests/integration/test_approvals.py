"""Approvals with real workers: a call waits for a person holding no task, lease or due
member of its own; the decision (approve, edit, reject, respond, expiry) is taken once, for
the arguments the person saw, and the call runs at most once.

The ``transfer`` tool (``tests/integration/tools.py``) requires approval, is not idempotent
and records every run it makes in ``reactq-test:toolruns``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from reactq.dispatcher.client import Dispatcher, RunHandle
from reactq.shared.engine.approval import args_digest
from reactq.shared.errors import ApprovalConflict, RunNotFound
from reactq.shared.requests import RunRequest
from tests.integration.conftest import LLMFixture
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = pytest.mark.integration


@pytest.fixture
def http(dispatcher: Dispatcher) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    from reactq.dispatcher.http.app import create_app

    with TestClient(create_app(dispatcher.settings)) as client:
        yield client


def _runs_of(r: redis.Redis, tag: str) -> list[dict[str, Any]]:
    return [x for x in (json.loads(v) for v in r.lrange("reactq-test:toolruns", 0, -1)) if x["tag"] == tag]


def _wait(predicate: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _events(h: RunHandle) -> list[Any]:
    return [e for _, e in h.events(until_done=False)]


def _requested(h: RunHandle, n: int = 1) -> list[dict[str, Any]]:
    """The run's ``approval {status: requested}`` events, once ``n`` are out."""
    def found() -> list[dict[str, Any]]:
        got = [e.data for e in _events(h) if e.channel == "approval" and e.data["status"] == "requested"]
        return got if len(got) >= n else []
    return list(_wait(found, "an approval request"))


def _transfer_run(llm: LLMFixture, d: Dispatcher, tag: str, *, with_echo: bool = False,
                  **request: Any) -> RunHandle:
    calls = [("t1", "transfer", {"tag": tag, "amount": 5})]
    if with_echo:
        calls.append(("e1", "echo", {"text": f"beside {tag}"}))
    q = llm.script(llm.unique(f"approvals {tag}"), [reply_tool_calls(calls), reply_text("all done")],
                   synthesis=reply_text("synthesized"))
    return d.submit(RunRequest(query=q, completion_check=False, **request))


def _done(h: RunHandle, call_id: str) -> dict[str, Any]:
    return next(e.data for e in _events(h) if e.channel == "step" and e.data.get("type") == "iteration"
                and e.data.get("status") == "done" and e.data.get("tool_call_id") == call_id)


def _tool_message(llm: LLMFixture, h: RunHandle, call_id: str) -> str:
    query = h.d.store.load(h.run_id).request["query"]
    for req in reversed(llm.requests_for(query)):
        for m in req["messages"]:
            if m["role"] == "tool" and m.get("tool_call_id") == call_id:
                return str(m["content"])
    raise AssertionError(f"no tool message for {call_id}")


def test_a_call_waits_holding_nothing_and_runs_once_when_approved(workers: Any, dispatcher: Dispatcher,
                                                                  llm: LLMFixture, r: redis.Redis,
                                                                  http: Any) -> None:
    tag = f"approve-{uuid.uuid4().hex[:6]}"
    h = _transfer_run(llm, dispatcher, tag, with_echo=True)
    req = _requested(h)[0]
    assert req["tool_name"] == "transfer" and req["tool_args"] == {"tag": tag, "amount": 5}
    assert req["args_digest"] == args_digest({"tag": tag, "amount": 5})
    assert "requires approval" in req["reason"] and req["expires_at"] > time.time() + 3600

    # The turn's other call ran at once; then the run waits, holding nothing.
    _wait(lambda: h.status()["status"] == "waiting", "status waiting")
    assert dispatcher.store.ledger_get(h.run_id, "e1")["status"] == "done"
    keys = dispatcher.keys
    members = [m.decode() for m in r.zrange(keys.due, 0, -1)]
    mine = [m for m in members if h.run_id in m]
    assert mine == [f"approval:{h.run_id}:t1"], mine
    assert not r.exists(keys.lease(f"run:{h.run_id}")) and not r.exists(keys.lease(f"tool:{h.run_id}:t1"))
    assert _runs_of(r, tag) == []
    time.sleep(1.0)  # a waiting run is not resent by anyone
    assert _runs_of(r, tag) == [] and h.status()["status"] == "waiting"

    # Lists: the run's, the inbox, the runs list filtered by status.
    listed = http.get(f"/v1/runs/{h.run_id}/approvals").json()["approvals"]
    assert [a["approval_id"] for a in listed] == [req["approval_id"]] and listed[0]["status"] == "pending"
    inbox = http.get("/v1/approvals", params={"status": "pending", "limit": 500}).json()["approvals"]
    assert req["approval_id"] in [a["approval_id"] for a in inbox]
    waiting = http.get("/v1/runs", params={"status": "waiting"}).json()["runs"]
    assert h.run_id in [row["run_id"] for row in waiting]

    # Approve: the call runs once, the run goes on and succeeds.
    url = f"/v1/runs/{h.run_id}/approvals/{req['approval_id']}"
    got = http.post(url, json={"decision": "approve", "args_digest": req["args_digest"], "by": "ops"})
    assert got.status_code == 200, got.text
    assert got.json() == {"approval_id": req["approval_id"], "status": "approved"}
    assert h.result(timeout=60)["status"] == "succeeded"
    assert len(_runs_of(r, tag)) == 1
    events = [e for _, e in h.events(timeout=10)]
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "each seq once, in order"
    kinds = [(e.channel, e.data.get("status"), e.data.get("tool_call_id")) for e in events]
    decided = kinds.index(("approval", "approved", "t1"))
    assert kinds.index(("approval", "requested", "t1")) < decided < kinds.index(("step", "done", "t1"))
    assert events[decided].data["decided_by"] == "ops"
    assert _done(h, "t1")["approval"] == "approved"
    assert _tool_message(llm, h, "t1") == f"moved 5 ({tag})"

    # A second decision is refused, naming the first; an unknown one is 404.
    again = http.post(url, json={"decision": "reject", "args_digest": req["args_digest"]})
    assert again.status_code == 409 and "approved by ops" in again.text
    assert http.post(f"/v1/runs/{h.run_id}/approvals/apr_nope",
                     json={"decision": "approve", "args_digest": req["args_digest"]}).status_code == 404
    assert http.get(f"/v1/runs/{h.run_id}/approvals").json()["approvals"][0]["status"] == "approved"
    assert req["approval_id"] not in [a["approval_id"] for a in
                                      http.get("/v1/approvals", params={"limit": 500}).json()["approvals"]]


def test_an_edit_runs_the_approved_arguments_bound_to_the_digest_seen(workers: Any, dispatcher: Dispatcher,
                                                                      llm: LLMFixture, r: redis.Redis,
                                                                      http: Any) -> None:
    tag = f"edit-{uuid.uuid4().hex[:6]}"
    h = _transfer_run(llm, dispatcher, tag)
    req = _requested(h)[0]
    url = f"/v1/runs/{h.run_id}/approvals/{req['approval_id']}"
    edited = {"tag": tag, "amount": 2}
    stale = http.post(url, json={"decision": "edit", "args_digest": args_digest(edited), "args": edited})
    assert stale.status_code == 409 and "digest" in stale.text
    missing = http.post(url, json={"decision": "edit", "args_digest": req["args_digest"]})
    assert missing.status_code == 422 and "args" in missing.text
    ok = http.post(url, json={"decision": "edit", "args_digest": req["args_digest"], "args": edited})
    assert ok.status_code == 200 and ok.json()["status"] == "edited"
    assert h.result(timeout=60)["status"] == "succeeded"
    done = _done(h, "t1")
    assert done["tool_args"] == {"tag": tag, "amount": 5} and done["approved_args"] == edited
    assert done["approval"] == "edited"
    assert _tool_message(llm, h, "t1") == f"moved 2 ({tag})"
    assert len(_runs_of(r, tag)) == 1


def test_a_rejection_is_not_run_and_reads_unlike_an_interruption(workers: Any, dispatcher: Dispatcher,
                                                                 llm: LLMFixture, r: redis.Redis) -> None:
    tag = f"reject-{uuid.uuid4().hex[:6]}"
    h = _transfer_run(llm, dispatcher, tag)
    req = _requested(h)[0]
    assert h.decide(req["approval_id"], "reject", message="not this month", by="ana") == {
        "approval_id": req["approval_id"], "status": "rejected"}
    assert h.result(timeout=60)["status"] == "succeeded"
    text = _tool_message(llm, h, "t1")
    assert "did not approve" in text and "not this month" in text
    assert "interrupt" not in text.lower() and "cancel" not in text.lower()
    assert _runs_of(r, tag) == []
    with pytest.raises(ApprovalConflict, match="rejected by ana"):
        h.decide(req["approval_id"], "approve")
    with pytest.raises(RunNotFound):
        h.decide("apr_unknown", "approve", args_digest=req["args_digest"])


def test_a_response_is_the_observation(workers: Any, dispatcher: Dispatcher, llm: LLMFixture,
                                       r: redis.Redis) -> None:
    tag = f"respond-{uuid.uuid4().hex[:6]}"
    h = _transfer_run(llm, dispatcher, tag)
    req = _requested(h)[0]
    assert h.approvals()[0]["status"] == "pending"
    h.decide(req["approval_id"], "respond", message="Done by hand: moved 5 from the safe.")
    assert h.result(timeout=60)["status"] == "succeeded"
    assert _tool_message(llm, h, "t1") == "Done by hand: moved 5 from the safe."
    assert _runs_of(r, tag) == [] and h.approvals()[0]["status"] == "responded"


def test_the_run_policy_makes_other_tools_wait(workers: Any, dispatcher: Dispatcher, llm: LLMFixture) -> None:
    q = llm.script(llm.unique("approvals policy"), [reply_tool_calls([("e1", "echo", {"text": "hi"})]),
                                                    reply_text("ok")], synthesis=reply_text("ok"))
    h = dispatcher.submit(RunRequest(query=q, completion_check=False, approval={"tools": ["echo"]}))
    req = _requested(h)[0]
    assert req["tool_name"] == "echo" and "policy" in req["reason"]
    h.decide(req["approval_id"], "approve")
    assert h.result(timeout=60)["status"] == "succeeded"
    assert _done(h, "e1")["observation"] == "hi"


@pytest.mark.parametrize("on_timeout", ["reject", "approve"])
def test_an_expired_approval_applies_on_timeout(workers: Any, dispatcher: Dispatcher, llm: LLMFixture,
                                                on_timeout: str) -> None:
    """The run's field sets the terms of the waits it adds (a tool's own demand follows the
    operator's: ``test_approvals_precisely.py``)."""
    tag = f"expire-{on_timeout}-{uuid.uuid4().hex[:6]}"
    q = llm.script(llm.unique(f"approvals {tag}"), [reply_tool_calls([("e1", "echo", {"text": tag})]),
                                                    reply_text("all done")], synthesis=reply_text("synthesized"))
    h = dispatcher.submit(RunRequest(query=q, completion_check=False,
                                     approval={"tools": ["echo"], "timeout_s": 1, "on_timeout": on_timeout}))
    req = _requested(h)[0]
    assert req["expires_at"] - time.time() < 1.5
    assert h.result(timeout=30)["status"] == "succeeded"
    assert h.approvals()[0]["status"] == "expired"
    assert any(e.channel == "approval" and e.data["status"] == "expired" for e in _events(h))
    if on_timeout == "reject":
        assert "nobody decided" in _tool_message(llm, h, "e1")
    else:
        assert _tool_message(llm, h, "e1") == tag


def test_cancel_while_waiting_ends_the_run_within_a_second(workers: Any, dispatcher: Dispatcher,
                                                          llm: LLMFixture, r: redis.Redis, http: Any) -> None:
    tag = f"cancel-{uuid.uuid4().hex[:6]}"
    h = _transfer_run(llm, dispatcher, tag)
    req = _requested(h)[0]
    _wait(lambda: h.status()["status"] == "waiting", "status waiting")
    t0 = time.monotonic()
    h.cancel()
    assert h.result(timeout=10)["status"] == "cancelled"
    assert time.monotonic() - t0 < 1.0
    events = [e for _, e in h.events(timeout=10)]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1].channel == "done"
    _wait(lambda: h.approvals()[0]["status"] == "cancelled", "the approval cancelled")
    assert not [m for m in r.zrange(dispatcher.keys.due, 0, -1) if h.run_id.encode() in m]
    refused = http.post(f"/v1/runs/{h.run_id}/approvals/{req['approval_id']}",
                        json={"decision": "approve", "args_digest": req["args_digest"]})
    assert refused.status_code == 409
    assert _runs_of(r, tag) == []


@pytest.fixture(scope="module")
def asking(redis_url: str, llm: LLMFixture, backend: Any,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Dispatcher, redis.Redis]]:
    """Two workers of their own (database 13) whose PreToolUse hook asks for approval."""
    from reactq.shared.settings import Settings
    from tests.integration.conftest import WorkerFactory

    url, env = backend.isolated(13)
    r = backend.client(url)
    if backend.kind != "cluster":
        r.flushdb()
    factory = WorkerFactory(url, llm, tmp_path_factory.mktemp("approvals"), env)
    started = [factory.start(name, wait=False, concurrency=2, REACTQ_HOOKS="tests.integration.tools:ASK_HOOKS")
               for name in ("ask-a", "ask-b")]
    for w in started:
        factory.wait_ready(w)
    settings = Settings(redis_url=url, model="scripted", tools="tests.integration.tools:TOOLS", demo_tools=True,
                        openai_api_key="k", openai_base_url=llm.server.base_url, **backend.settings(env))
    yield Dispatcher(settings), r
    factory.stop_all()


def test_a_hook_that_asks_makes_the_call_wait(asking: tuple[Dispatcher, redis.Redis], llm: LLMFixture) -> None:
    d, r = asking
    tag = f"ask-{uuid.uuid4().hex[:6]}"
    calls = [("s1", "slow", {"tag": tag, "seconds": 0}), ("s2", "slow", {"tag": f"free-{tag}", "seconds": 0})]
    q = llm.script(llm.unique("approvals hook"), [reply_tool_calls(calls), reply_text("ok")],
                   synthesis=reply_text("ok"))
    h = d.submit(RunRequest(query=q, completion_check=False))
    req = _requested(h)[0]
    assert req["tool_call_id"] == "s1" and req["reason"] == "a tag that starts with 'ask' needs a person"
    _wait(lambda: _runs_of(r, f"free-{tag}"), "the call beside it to run")
    assert _runs_of(r, tag) == []
    h.decide(req["approval_id"], "approve")
    assert h.result(timeout=60)["status"] == "succeeded"
    assert len(_runs_of(r, tag)) == 1 and _done(h, "s1")["approval"] == "approved"


def test_people_decide_from_the_cli(workers: Any, dispatcher: Dispatcher, llm: LLMFixture, r: redis.Redis,
                                    redis_url: str) -> None:
    from tests.integration.conftest import worker_env
    from tests.integration.test_cli import reactq

    env = worker_env(redis_url, llm, COLUMNS="200")
    tag = f"cli-{uuid.uuid4().hex[:6]}"
    h = _transfer_run(llm, dispatcher, tag)
    req = _requested(h)[0]
    listed = reactq("approvals", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert req["approval_id"] in [a["approval_id"] for a in json.loads(listed.stdout)["approvals"]]
    table = reactq("approvals", "--run", h.run_id, env=env)
    assert req["approval_id"] in table.stdout and "transfer" in table.stdout and tag in table.stdout
    bad = reactq("approve", h.run_id, req["approval_id"], "--args", "[1]", env=env)
    assert bad.returncode == 2 and "--args" in bad.stderr
    done = reactq("approve", h.run_id, req["approval_id"], "--args", json.dumps({"tag": tag, "amount": 1}),
                  "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"approval_id": req["approval_id"], "status": "edited"}
    again = reactq("reject", h.run_id, req["approval_id"], "--message", "no", env=env)
    assert again.returncode == 1 and "already decided: edited" in again.stderr
    assert h.result(timeout=60)["status"] == "succeeded"
    assert _tool_message(llm, h, "t1") == f"moved 1 ({tag})"
    assert reactq("respond", h.run_id, "apr_unknown", "text", env=env).returncode == 2


def test_the_inbox_lists_every_run_oldest_first_a_page_at_a_time(workers: Any, dispatcher: Dispatcher,
                                                                 llm: LLMFixture, http: Any) -> None:
    handles = []
    for n in range(3):
        handles.append(_transfer_run(llm, dispatcher, f"inbox-{n}-{uuid.uuid4().hex[:6]}"))
        _requested(handles[-1])  # one after the other: requested_at orders them
    ids = [_requested(h)[0]["approval_id"] for h in handles]
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = http.get("/v1/approvals", params=params).json()
        seen += [a["approval_id"] for a in page["approvals"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert [i for i in seen if i in ids] == ids
    times = [a["requested_at"] for a in dispatcher.approvals.inbox(limit=500)["approvals"]]
    assert times == sorted(times)
    assert http.get("/v1/approvals", params={"status": "approved"}).status_code == 422
    assert http.get("/v1/approvals", params={"cursor": "nope!"}).status_code == 422
    for h in handles:
        h.cancel()
    for h in handles:
        assert h.result(timeout=30)["status"] == "cancelled"


def test_metrics_count_pending_approvals_decisions_and_waits(workers: Any, dispatcher: Dispatcher,
                                                            llm: LLMFixture) -> None:
    from reactq.dispatcher.http.metrics import snapshot

    def decided(snap: dict[str, Any]) -> float:
        return float(snap.get("reactq_approval_decisions_total", {}).get((("decision", "rejected"),), 0))

    before = snapshot(dispatcher.settings)
    h = _transfer_run(llm, dispatcher, f"metrics-{uuid.uuid4().hex[:6]}")
    req = _requested(h)[0]
    waiting = snapshot(dispatcher.settings)
    assert waiting["reactq_approvals_pending"][()] >= 1
    h.decide(req["approval_id"], "reject")
    after = snapshot(dispatcher.settings)
    assert decided(after) == decided(before) + 1
    counts = after["reactq_approval_wait_seconds_count"]
    assert counts[(("decision", "rejected"),)] >= 1
    assert h.result(timeout=60)["status"] == "succeeded"


def test_an_interrupt_while_waiting_is_held_for_the_next_turn(workers: Any, dispatcher: Dispatcher,
                                                              llm: LLMFixture) -> None:
    h = _transfer_run(llm, dispatcher, f"interrupt-{uuid.uuid4().hex[:6]}")
    req = _requested(h)[0]
    _wait(lambda: h.status()["status"] == "waiting", "status waiting")
    h.interrupt("also say hello")
    time.sleep(0.5)
    assert h.status()["status"] == "waiting"
    assert not [e for e in _events(h) if e.channel == "inject"]
    h.decide(req["approval_id"], "approve")
    assert h.result(timeout=60)["status"] == "succeeded"
    kinds = [(e.channel, e.data.get("status")) for e in _events(h)]
    assert kinds.index(("approval", "approved")) < kinds.index(("inject", None))
    query = h.d.store.load(h.run_id).request["query"]
    last = llm.requests_for(query)[-1]["messages"]
    assert any("also say hello" in str(m.get("content")) for m in last if m["role"] == "user")


def test_a_waiting_run_is_its_threads_active_run(workers: Any, dispatcher: Dispatcher, llm: LLMFixture,
                                                 http: Any) -> None:
    thread = f"approvals-{uuid.uuid4().hex[:8]}"
    h = _transfer_run(llm, dispatcher, f"thread-{uuid.uuid4().hex[:6]}", thread_id=thread)
    req = _requested(h)[0]
    _wait(lambda: h.status()["status"] == "waiting", "status waiting")
    q2 = llm.script(llm.unique("approvals thread next"), [reply_text("second")], synthesis=reply_text("second"))
    refused = http.post("/v1/runs", json={"query": q2, "thread_id": thread, "multitask_strategy": "reject"})
    assert refused.status_code == 409 and h.run_id in refused.text
    took = http.post("/v1/runs", json={"query": q2, "thread_id": thread, "multitask_strategy": "interrupt",
                                       "completion_check": False})
    assert took.status_code == 202, took.text
    assert h.result(timeout=30)["status"] == "cancelled"
    _wait(lambda: h.approvals()[0]["status"] == "cancelled", "the approval cancelled")
    assert dispatcher.handle(took.json()["run_id"]).result(timeout=60)["status"] == "succeeded"
    assert http.post(f"/v1/runs/{h.run_id}/approvals/{req['approval_id']}",
                     json={"decision": "approve", "args_digest": req["args_digest"]}).status_code == 409


def test_a_batch_counts_its_waiting_lines_and_ends_once_they_are_decided(workers: Any, dispatcher: Dispatcher,
                                                                         llm: LLMFixture, http: Any,
                                                                         r: redis.Redis) -> None:
    tag = f"batch-{uuid.uuid4().hex[:6]}"
    waits = llm.script(llm.unique("approvals batch line"), [
        reply_tool_calls([("t1", "transfer", {"tag": tag, "amount": 1})]), reply_text("ok")],
        synthesis=reply_text("ok"))
    plain = llm.script(llm.unique("approvals batch plain"), [reply_text("plain")], synthesis=reply_text("plain"))
    created = http.post("/v1/batches", json={"requests": [{"query": waits, "completion_check": False},
                                                          {"query": plain}], "concurrency": 2})
    assert created.status_code == 202, created.text
    batch_id = created.json()["batch_id"]
    view = _wait(lambda: (v := http.get(f"/v1/batches/{batch_id}").json())["waiting"] == 1 and v["done"] == 1 and v,
                 "one line waiting, the other done")
    assert view["status"] == "running" and view["running"] == 1
    run_id = next(row["run_id"] for row in http.get("/v1/runs", params={"batch_id": batch_id}).json()["runs"]
                  if row["status"] == "waiting")
    approval = dispatcher.handle(run_id).approvals()[0]
    dispatcher.handle(run_id).decide(approval["approval_id"], "approve")
    done = _wait(lambda: (v := http.get(f"/v1/batches/{batch_id}").json())["status"] == "done" and v,
                 "the batch done", timeout=60)
    assert done["succeeded"] == 2 and done["waiting"] == 0 and len(_runs_of(r, tag)) == 1


def test_the_http_client_lists_and_decides(workers: Any, dispatcher: Dispatcher, llm: LLMFixture,
                                           http: Any, r: redis.Redis) -> None:
    import reactq

    client = reactq.Client("http://testserver", http_client=http)
    tag = f"client-{uuid.uuid4().hex[:6]}"
    h = _transfer_run(llm, dispatcher, tag)
    _requested(h)
    pending = client.runs.approvals(h.run_id)[0]
    assert pending.tool_name == "transfer" and pending.status == "pending"
    assert pending.approval_id in [a.approval_id for a in client.approvals.list(status="pending", limit=500).approvals]
    decided = client.approvals.decide(h.run_id, pending.approval_id, "approve", args_digest=pending.args_digest)
    assert decided.status == "approved"
    events = list(client.runs.stream(h.run_id))
    assert [e.data["status"] for e in events if e.event == "approval"] == ["requested", "approved"]
    assert events[-1].event == "done" and len(_runs_of(r, tag)) == 1
