"""Forks through real workers and the scripted model: a fork starts at a turn of its parent
with the parent's history, and the parent's ledger answers the calls its model makes again."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from reactq.dispatcher.client import Dispatcher
from reactq.shared.keys import Keys
from reactq.shared.requests import RunRequest
from tests.integration.conftest import LLMFixture
from tests.scripted_server import reply_error, reply_text, reply_tool_calls

pytestmark = pytest.mark.integration


@pytest.fixture
def http(dispatcher: Dispatcher) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    from reactq.dispatcher.http.app import create_app

    with TestClient(create_app(dispatcher.settings)) as client:
        yield client


def _ran(r: redis.Redis, tag: str) -> int:
    return sum(1 for raw in r.lrange("reactq-test:toolruns", 0, -1) if json.loads(raw)["tag"] == tag)


def _events(d: Dispatcher, run_id: str) -> list[Any]:
    return [e for _, e in d.handle(run_id).events(timeout=60)]


def _done_calls(events: list[Any]) -> dict[str, dict[str, Any]]:
    return {e.data["tool_call_id"]: e.data for e in events
            if e.channel == "step" and e.data.get("type") == "iteration" and e.data.get("status") == "done"}


def _failed_at_turn_3(llm: LLMFixture, d: Dispatcher, tag: str, tenant: str = "default") -> tuple[str, str]:
    """A parent: turn 1 charges a card (not idempotent) and sleeps (idempotent), turn 2
    charges again, turn 3's LLM call fails (a 400 is not retried)."""
    q = llm.script(llm.unique("fork me"), [
        reply_tool_calls([("c1", "charge_card", {"tag": f"{tag}-a", "seconds": 0}),
                          ("c2", "slow", {"tag": f"{tag}-b", "seconds": 0})]),
        reply_tool_calls([("c3", "charge_card", {"tag": f"{tag}-c", "seconds": 0})]),
        reply_error(400, {"error": {"message": "provider outage", "type": "invalid_request_error"}}),
    ])
    h = d.submit(RunRequest(query=q, completion_check=False), tenant=tenant)
    assert h.result(timeout=60)["status"] == "failed"
    return q, h.run_id


def test_a_fork_from_the_last_failure_carries_the_history_and_runs_no_earlier_tool(
        workers: Any, dispatcher: Dispatcher, llm: LLMFixture, r: redis.Redis, http: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    q, parent = _failed_at_turn_3(llm, dispatcher, tag)
    assert [_ran(r, f"{tag}-{x}") for x in "abc"] == [1, 1, 1]
    before = len(llm.requests_for(q))
    llm.script(q, [reply_text("unused"), reply_text("unused"), reply_text("the answer")])  # the outage is over

    got = http.post(f"/v1/runs/{parent}/fork", json={})
    assert got.status_code == 202, got.text
    body = got.json()
    assert body["forked_from"] == {"run_id": parent, "turn": 3}
    assert body["plan"]["turn"] == 3 and body["plan"]["calls"] == []
    fork = body["run_id"]
    assert dispatcher.handle(fork).result(timeout=60)["status"] == "succeeded"
    assert [_ran(r, f"{tag}-{x}") for x in "abc"] == [1, 1, 1], "no earlier tool ran again"
    events = _events(dispatcher, fork)
    assert events[0].channel == "fork" and events[0].seq == 1
    assert events[0].data["forked_from"] == {"run_id": parent, "turn": 3} and events[0].data["reuse"] == "effects"
    assert next(e for e in events if e.channel == "step").data["iteration"] == 3
    first = llm.requests_for(q)[before]  # the fork's first LLM request
    tools = [m for m in first["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["c1", "c2", "c3"]
    assert sum(1 for m in first["messages"] if m["role"] == "assistant") == 2
    assert http.get(f"/v1/runs/{fork}").json()["forked_from"] == {"run_id": parent, "turn": 3}
    rows = http.get("/v1/runs", params={"forked_from": parent}).json()["runs"]
    assert [row["run_id"] for row in rows] == [fork] and rows[0]["forked_from"]["run_id"] == parent


@pytest.mark.parametrize(("reuse", "ran_a", "ran_b"), [("effects", 1, 2), ("all", 1, 1), ("none", 2, 2)])
def test_reuse_decides_which_repeated_calls_run_again(workers: Any, dispatcher: Dispatcher, llm: LLMFixture,
                                                      r: redis.Redis, http: Any, reuse: str, ran_a: int,
                                                      ran_b: int) -> None:
    tag = uuid.uuid4().hex[:8]
    q, parent = _failed_at_turn_3(llm, dispatcher, tag)
    llm.script(q, [reply_tool_calls([("x1", "charge_card", {"tag": f"{tag}-a", "seconds": 0}),
                                     ("x2", "slow", {"tag": f"{tag}-b", "seconds": 0})]),
                   reply_text("done"), reply_text("done")])
    dry = http.post(f"/v1/runs/{parent}/fork", json={"from": 1, "reuse": reuse, "dry_run": True})
    assert dry.status_code == 200, dry.text
    plan = {c["tool_call_id"]: c for c in dry.json()["plan"]["calls"]}
    assert set(plan) == {"c1", "c2", "c3"} and plan["c1"]["ledger"] == "done" and not plan["c1"]["idempotent"]
    expected = {"effects": ("reused", "runs"), "all": ("reused", "reused"), "none": ("runs", "runs")}[reuse]
    assert (plan["c1"]["if_repeated"], plan["c2"]["if_repeated"]) == expected

    got = http.post(f"/v1/runs/{parent}/fork", json={"from": 1, "reuse": reuse})
    assert got.status_code == 202, got.text
    fork = got.json()["run_id"]
    assert dispatcher.handle(fork).result(timeout=60)["status"] == "succeeded"
    assert (_ran(r, f"{tag}-a"), _ran(r, f"{tag}-b")) == (ran_a, ran_b)
    done = _done_calls(_events(dispatcher, fork))
    assert bool(done["x1"].get("reused")) == (ran_a == 1)
    assert bool(done["x2"].get("reused")) == (ran_b == 1)
    if ran_a == 1:
        assert done["x1"]["observation"] == f"once {tag}-a done"


def test_an_uncertain_parent_call_waits_for_a_person(workers: Any, dispatcher: Dispatcher, llm: LLMFixture,
                                                     r: redis.Redis, http: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    q, parent = _failed_at_turn_3(llm, dispatcher, tag)
    # What a worker killed mid-call leaves: the call may or may not have run.
    ledger = Keys(dispatcher.settings.key_prefix).run_tools(parent)
    rec = json.loads(r.hget(ledger, "c1"))
    rec["outcome"]["uncertain"] = True
    r.hset(ledger, "c1", json.dumps(rec))
    llm.script(q, [reply_tool_calls([("x1", "charge_card", {"tag": f"{tag}-a", "seconds": 0})]),
                   reply_text("done"), reply_text("done")])
    dry = http.post(f"/v1/runs/{parent}/fork", json={"from": 1, "dry_run": True}).json()
    assert {c["tool_call_id"]: c["if_repeated"] for c in dry["plan"]["calls"]}["c1"] == "waits"
    fork = http.post(f"/v1/runs/{parent}/fork", json={"from": 1}).json()["run_id"]
    h = dispatcher.handle(fork)
    pending = _wait_for(lambda: [a for a in h.approvals() if a["status"] == "pending"])
    assert parent in pending[0]["reason"] and _ran(r, f"{tag}-a") == 1
    h.decide(pending[0]["approval_id"], "reject")
    assert h.result(timeout=60)["status"] == "succeeded"
    assert _ran(r, f"{tag}-a") == 1, "rejected: not run again"


def test_a_dry_run_creates_nothing_and_edits_apply(workers: Any, dispatcher: Dispatcher, llm: LLMFixture,
                                                   r: redis.Redis, http: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    q, parent = _failed_at_turn_3(llm, dispatcher, tag)
    runs_before = r.zcard(Keys(dispatcher.settings.key_prefix).runs)
    dry = http.post(f"/v1/runs/{parent}/fork", json={"dry_run": True})
    assert dry.status_code == 200 and dry.json()["run_id"] is None
    assert r.zcard(Keys(dispatcher.settings.key_prefix).runs) == runs_before
    assert http.get("/v1/runs", params={"forked_from": parent}).json()["runs"] == []
    before = len(llm.requests_for(q))
    llm.script(q, [reply_text("unused"), reply_text("unused"), reply_text("edited answer")])
    body = {"edit": {"message": "please finish now", "system_prompt": "Be brief.",
                     "tool_result": {"tool_call_id": "c3", "observation": "card declined"}},
            "idempotency_key": f"k-{tag}"}
    got = http.post(f"/v1/runs/{parent}/fork", json=body)
    assert got.status_code == 202, got.text
    again = http.post(f"/v1/runs/{parent}/fork", json=body)
    assert again.json()["run_id"] == got.json()["run_id"] and again.json()["created"] is False
    assert dispatcher.handle(got.json()["run_id"]).result(timeout=60)["status"] == "succeeded"
    first = llm.requests_for(q)[before]["messages"]
    assert "Be brief." in first[0]["content"]
    assert next(m for m in first if m.get("tool_call_id") == "c3")["content"] == "card declined"
    assert first[-1] == {"role": "user", "content": "please finish now"}


def test_refusals(workers: Any, dispatcher: Dispatcher, llm: LLMFixture, http: Any) -> None:
    assert http.post("/v1/runs/nope/fork", json={}).status_code == 404
    q = llm.script(llm.unique("fine run"), [reply_text("fine")])
    h = dispatcher.submit(RunRequest(query=q))
    h.result(timeout=60)
    got = http.post(f"/v1/runs/{h.run_id}/fork", json={})
    assert got.status_code == 409 and "did not fail" in got.json()["error"]["message"]
    got = http.post(f"/v1/runs/{h.run_id}/fork", json={"from": 5})
    assert got.status_code == 422 and got.json()["error"]["field"] == "from"
    got = http.post(f"/v1/runs/{h.run_id}/fork", json={"reuse": "some"})
    assert got.status_code == 422
    slow = llm.script(llm.unique("slow run"), [reply_text("slow", delay=3.0)])
    running = dispatcher.submit(RunRequest(query=slow))
    got = http.post(f"/v1/runs/{running.run_id}/fork", json={"from": "last_turn"})
    assert got.status_code == 409 and "has not ended" in got.json()["error"]["message"]
    running.result(timeout=60)


def _wait_for(fn: Any, timeout: float = 30) -> Any:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("timed out")


def _batch_done(http: Any, batch_id: str) -> dict[str, Any]:
    return _wait_for(lambda: (v := http.get(f"/v1/batches/{batch_id}", params={"results": True}).json())
                     and v["status"] == "done" and v, timeout=60)


def test_a_batch_forks_its_failed_lines_and_keeps_the_others(workers: Any, dispatcher: Dispatcher,
                                                             llm: LLMFixture, r: redis.Redis, http: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    ok1 = llm.script(llm.unique("batch ok 1"), [reply_text("one")])
    ok2 = llm.script(llm.unique("batch ok 2"), [reply_text("two")])
    bad = llm.script(llm.unique("batch outage"), [
        reply_tool_calls([("c1", "charge_card", {"tag": f"{tag}-a", "seconds": 0})]),
        reply_error(400, {"error": {"message": "provider outage", "type": "invalid_request_error"}})])
    got = http.post("/v1/batches", json={"requests": [{"query": ok1}, {"query": bad, "completion_check": False},
                                                      {"query": ok2}]})
    assert got.status_code == 202, got.text
    source = got.json()["batch_id"]
    first = _batch_done(http, source)
    assert first["succeeded"] == 2 and first["failed"] == 1
    old = {res["line"]: res for res in first["results"]}
    llm.script(bad, [reply_text("unused"), reply_text("recovered")])

    dry = http.post(f"/v1/batches/{source}/fork", json={"dry_run": True})
    assert dry.status_code == 200 and dry.json()["forked"] == 1 and dry.json()["kept"] == 2
    got = http.post(f"/v1/batches/{source}/fork", json={})
    assert got.status_code == 202, got.text
    body = got.json()
    assert body["forked_from"] == source and (body["forked"], body["kept"]) == (1, 2)
    assert http.post(f"/v1/batches/{source}/fork", json={}).json()["batch_id"] == body["batch_id"]
    done = _batch_done(http, body["batch_id"])
    assert done["succeeded"] == 3 and done["failed"] == 0
    new = {res["line"]: res for res in done["results"]}
    assert new[1]["run_id"] == old[1]["run_id"] and new[3]["run_id"] == old[3]["run_id"]
    assert new[1]["forked"] is False
    assert new[2]["run_id"] != old[2]["run_id"] and new[2]["answer"]
    assert http.get(f"/v1/runs/{new[2]['run_id']}").json()["forked_from"] == {"run_id": old[2]["run_id"], "turn": 2}
    assert _ran(r, f"{tag}-a") == 1, "the failed line's earlier tool did not run again"


def test_a_dag_reruns_its_failed_step_as_a_fork_and_its_dependants(workers: Any, dispatcher: Dispatcher,
                                                                   llm: LLMFixture, http: Any) -> None:
    from reactq.dispatcher.dag import DagDispatcher
    from reactq.shared.requests import DagRequest, PlanStepIn
    from tests.integration.test_dag import script_dag, script_step, step_requests

    uid = uuid.uuid4().hex[:8]
    goal = f"Forked DAG [{uid}]"
    script_dag(llm, goal, analysis={"achieved": True, "confidence": 0.9, "reasoning": "fine"})
    script_step(llm, f"step A {uid}", [reply_text("ok")], "out-A")
    script_step(llm, f"step B {uid}", [reply_error(400, {"error": {"message": "provider outage"}})], "-")
    script_step(llm, f"step D {uid}", [reply_text("ok")], "out-D")
    dags = DagDispatcher(dispatcher.settings)
    handle = dags.submit(DagRequest(goal=goal, max_rounds=1, steps=[
        PlanStepIn(id="A", task=f"step A {uid}"), PlanStepIn(id="B", task=f"step B {uid}", dependencies=["A"]),
        PlanStepIn(id="D", task=f"step D {uid}", dependencies=["B"])]))
    handle.result(timeout=60)
    before = {s["id"]: s for s in handle.status()["steps"]}
    assert [before[k]["status"] for k in "ABD"] == ["completed", "failed", "failed"]
    script_step(llm, f"step B {uid}", [reply_text("ok")], "out-B")  # the outage is over

    got = http.post(f"/v1/dags/{handle.dag_id}/fork", json={})
    assert got.status_code == 202, got.text
    body = got.json()
    assert body["forked_from"] == handle.dag_id and body["kept"] == ["A"] and body["rerun"] == ["B", "D"]
    assert http.post(f"/v1/dags/{handle.dag_id}/fork", json={}).json()["dag_id"] == body["dag_id"]
    fork = dags.handle(body["dag_id"])
    fork.result(timeout=60)
    after = {s["id"]: s for s in fork.status()["steps"]}
    assert [after[k]["status"] for k in "ABD"] == ["completed"] * 3
    assert after["A"]["run_id"] == before["A"]["run_id"] and after["A"]["result"] == "out-A"
    assert http.get(f"/v1/runs/{after['B']['run_id']}").json()["forked_from"]["run_id"] == before["B"]["run_id"]
    loop_calls = [b for b in step_requests(llm, f"step A {uid}") if not b.get("stream")]
    assert len(loop_calls) == 1, "the kept step did not run again"
    assert after["D"]["result"] == "out-D" and fork.status()["answer"] == "final DAG answer"
    again = http.post(f"/v1/dags/{body['dag_id']}/fork", json={})
    assert again.status_code == 409 and "no failed step" in again.json()["error"]["message"]


def test_the_cli_forks_a_run_and_shows_its_plan(workers: Any, dispatcher: Dispatcher, llm: LLMFixture,
                                                r: redis.Redis, redis_url: str) -> None:
    from tests.integration.conftest import worker_env
    from tests.integration.test_cli import reactq

    env = worker_env(redis_url, llm, COLUMNS="200")
    tag = uuid.uuid4().hex[:8]
    q, parent = _failed_at_turn_3(llm, dispatcher, tag)
    dry = reactq("fork", parent, "--from", "1", "--dry-run", "--json", env=env)
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["run_id"] is None and [c["tool_call_id"] for c in plan["plan"]["calls"]] == ["c1", "c2", "c3"]
    table = reactq("fork", parent, "--from", "1", "--dry-run", env=env)
    assert "charge_card" in table.stdout and "reused" in table.stdout
    llm.script(q, [reply_text("unused"), reply_text("unused"), reply_text("cli answer")])
    made = reactq("fork", parent, "--message", "go on", "--json", env=env)
    assert made.returncode == 0, made.stderr
    fork = json.loads(made.stdout)["run_id"]
    assert dispatcher.handle(fork).result(timeout=60)["status"] == "succeeded"
    assert [_ran(r, f"{tag}-{x}") for x in "abc"] == [1, 1, 1]
    assert reactq("fork", "nope", env=env).returncode == 2
    assert reactq("fork", parent, "--from", "9", env=env).returncode == 2
    refused = reactq("fork", fork, "--json", env=env)
    assert refused.returncode == 2 and "did not fail" in refused.stderr


def test_another_tenants_run_is_not_found_and_a_fork_is_its_parents_tenant(
        workers: Any, dispatcher: Dispatcher, llm: LLMFixture) -> None:
    from fastapi.testclient import TestClient

    from reactq.dispatcher.http.app import create_app

    token = "fork-admin-token"
    settings = dispatcher.settings.model_copy(update={"api_token": token})
    tag = uuid.uuid4().hex[:8]
    _, parent = _failed_at_turn_3(llm, dispatcher, tag, tenant="acme")
    with TestClient(create_app(settings)) as c:
        admin = {"Authorization": f"Bearer {token}"}
        keys = {t: c.post("/v1/keys", json={"tenant": t, "scopes": ["runs:read", "runs:write"], "name": t},
                          headers=admin).json()["key"] for t in ("acme", "beta")}
        beta = {"Authorization": f"Bearer {keys['beta']}"}
        refused = c.post(f"/v1/runs/{parent}/fork", json={"dry_run": True}, headers=beta)
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"
        got = c.post(f"/v1/runs/{parent}/fork", json={"from": "last_turn"}, headers=admin)
        assert got.status_code == 202, got.text
        fork = c.get(f"/v1/runs/{got.json()['run_id']}", headers={"Authorization": f"Bearer {keys['acme']}"})
        assert fork.status_code == 200 and fork.json()["tenant"] == "acme"
        assert c.get(f"/v1/runs/{got.json()['run_id']}", headers=beta).status_code == 404
    dispatcher.handle(got.json()["run_id"]).result(timeout=60)


def test_a_run_carrying_a_replay_policy_answers_from_the_recorded_ledger_on_workers(
        workers: Any, dispatcher: Dispatcher, llm: LLMFixture, r: redis.Redis) -> None:
    """The Celery twin of tests/unit/test_recorded_ledger.py: a run created with ``replay``
    (an eval's replay: only ``done`` calls match, the others are not executed) reads the
    recorded calls at its first step; its tool tasks carry out the decisions."""
    from reactq.shared.engine.recorded import NOT_RECORDED_OBSERVATION, ReplayPolicy
    from reactq.shared.wire import ITERATE

    tag = uuid.uuid4().hex[:8]
    q = llm.script(llm.unique("replay me"), [
        reply_tool_calls([("c1", "charge_card", {"tag": f"{tag}-a", "seconds": 0})]), reply_text("done")])
    recorded = dispatcher.submit(RunRequest(query=q, completion_check=False))
    assert recorded.result(timeout=60)["status"] == "succeeded" and _ran(r, f"{tag}-a") == 1
    llm.script(q, [reply_tool_calls([("x1", "charge_card", {"tag": f"{tag}-a", "seconds": 0}),
                                     ("x2", "charge_card", {"tag": f"{tag}-b", "seconds": 0})]),
                   reply_text("done")])
    policy = ReplayPolicy(source_run=recorded.run_id, reuse="all", match="done", unmatched="refuse",
                          label="the replayed eval")
    run_id = uuid.uuid4().hex
    dispatcher.store.create(run_id, RunRequest(query=q, completion_check=False).model_dump(mode="json"),
                            replay=policy.model_dump(mode="json"))
    dispatcher.send(ITERATE, [run_id, 0])
    assert dispatcher.handle(run_id).result(timeout=60)["status"] == "succeeded"
    done = _done_calls(_events(dispatcher, run_id))
    assert done["x1"]["reused"] is True and done["x1"]["observation"] == f"once {tag}-a done"
    assert done["x2"]["observation"] == NOT_RECORDED_OBSERVATION.format(label="the replayed eval")
    assert "reused" not in done["x2"]
    assert (_ran(r, f"{tag}-a"), _ran(r, f"{tag}-b")) == (1, 0), "nothing executed"
