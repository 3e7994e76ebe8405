"""The DAG store, the Python door, the HTTP routes and the CLI's pure parts, on fakeredis."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from reactq.dispatcher.dag import DagDispatcher
from reactq.dispatcher.cli.dags import UsageError, load_request, steps_table
from reactq.dispatcher.http import errors
from reactq.dispatcher.http.dags import router
from reactq.dispatcher.http.gateway import Gateway
from reactq.shared.dag import machine as M
from reactq.shared.dag.config import DagConfig
from reactq.shared.dag.models import ExecutionPlan, PlanStep
from reactq.shared.stores.dags import DagNotFound, DagStore, public_view
from reactq.shared.errors import RequestError
from reactq.shared.keys import Keys
from reactq.shared.requests import DagRequest, PlanStepIn
from reactq.shared.settings import Settings


@pytest.fixture
def server() -> fakeredis.FakeServer:
    return fakeredis.FakeServer()


@pytest.fixture
def r(server: fakeredis.FakeServer) -> fakeredis.FakeRedis:
    client = fakeredis.FakeRedis(server=server)
    # What workers publish at start: the door validates names against it.
    client.hset(Keys().catalog, mapping={
        "tools": json.dumps([{"name": "slow"}, {"name": "echo"}]),
        "models": json.dumps([{"name": "general"}, {"name": "smart"}])})
    return client


class Sent(list[tuple[str, list[Any]]]):
    def __call__(self, task: str, args: list[Any], queue: str = "reactq.runs") -> None:
        self.append((task, args))


@pytest.fixture
def dags(r: fakeredis.FakeRedis) -> tuple[DagDispatcher, Sent]:
    d = DagDispatcher(Settings(redis_url="redis://fake"), redis_client=r, config=DagConfig(REACTQ_DAG_MAX_STEPS=3))
    sent = Sent()
    d.runs.send = sent  # type: ignore[method-assign]
    return d, sent


def env() -> M.Env:
    return M.Env(config=DagConfig(), now=100.0, model_for=lambda h: h or "general",
                 new_id=lambda: "child-1")


# -- store --------------------------------------------------------------------------------

def test_commit_is_compare_and_set_and_publishes_each_seq_once(r: fakeredis.FakeRedis) -> None:
    store = DagStore(r)
    store.create("d1", {"goal": "g"})
    state = M.new_dag("d1", DagRequest(goal="g"), model="smart", now=1.0)
    t = M.start_planning(state)
    assert store.commit(state, 0, t.events)
    stale = state.model_copy(deep=True)
    assert not store.commit(stale, 0, [M.emit(stale, "phase", name="x")]), "version 0 is gone"
    assert store.commit(state, 1, t.events)  # the same events again: not republished
    events = store.read_events("d1")
    assert [e.seq for _, e in events] == [1]
    rec = store.load("d1")
    assert (rec.version, rec.pub_seq, rec.status, rec.state.phase) == (2, 1, "running", "planning")


def test_a_finished_dag_stores_its_result_and_expires(r: fakeredis.FakeRedis) -> None:
    store = DagStore(r, ttl_seconds=60)
    store.create("d1", {"goal": "g"})
    state = M.new_dag("d1", DagRequest(goal="g"), model="smart", now=1.0)
    t = M.fail(state, "Pipeline error: boom", env())
    assert store.commit(state, 0, t.events)
    rec = store.load("d1")
    assert rec.status == "failed" and rec.result["answer"] == "Pipeline error: boom"
    assert 0 < r.ttl(Keys().dag("d1")) <= 60


def test_the_public_view_lists_steps_with_status_run_and_result(r: fakeredis.FakeRedis) -> None:
    store = DagStore(r)
    store.create("d1", {"goal": "g", "steps": [{"id": "a", "task": "t"}]})
    queued = public_view(store.load("d1"))
    assert queued["status"] == "queued" and queued["steps"][0]["status"] == "pending"
    state = M.new_dag("d1", DagRequest(goal="g"), model="smart", now=1.0)
    t = M.begin_round(state, ExecutionPlan(goal="g", steps=[PlanStep(id="a", task="t")]), env())
    store.commit(state, 0, t.events)
    view = public_view(store.load("d1"))
    assert view["round"] == 1 and view["phase"] == "executing"
    assert (view["steps"][0]["status"], view["steps"][0]["run_id"]) == ("running", "child-1")


class GatedRedis(fakeredis.FakeRedis):
    """A client whose pipelines and scripts (the record's write), in the thread named
    ``gated``, say they ``arrived`` and wait for ``gate`` before they execute: one creator is
    held half-way while another one runs."""

    gated = ""
    arrived = threading.Event()
    gate = threading.Event()

    def pipeline(self, *args: Any, **kwargs: Any) -> Any:
        pipe = super().pipeline(*args, **kwargs)
        if threading.current_thread().name == self.gated:
            execute = pipe.execute

            def held(*a: Any, **k: Any) -> Any:
                self.arrived.set()
                assert self.gate.wait(10)
                return execute(*a, **k)

            pipe.execute = held
        return pipe

    def eval(self, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == self.gated:
            self.arrived.set()
            assert self.gate.wait(10)
        return super().eval(*args, **kwargs)


def _dag_hashes(r: fakeredis.FakeRedis) -> list[bytes]:
    return [k for k in r.scan_iter(match=Keys().dag("*"), _type="HASH")]


def test_two_concurrent_creates_with_one_key_make_one_dag_and_both_find_it(server) -> None:
    r = GatedRedis(server=server)
    r.gated, r.arrived, r.gate = "first", threading.Event(), threading.Event()
    store = DagStore(r)
    answers: dict[str, tuple[str, bool]] = {}
    found: dict[str, bool] = {}

    def create(name: str) -> None:
        answers[name] = store.create(name, {"goal": "g"}, idempotency_key="k")
        try:
            store.load(answers[name][0])  # the answer names a DAG that is there
            found[name] = True
        except DagNotFound:
            found[name] = False
        if name == "second":
            r.gate.set()

    threads = [threading.Thread(target=create, args=(n,), name=n) for n in ("first", "second")]
    threads[0].start()
    assert r.arrived.wait(10)  # the first creator is held inside create
    threads[1].start()
    for t in threads:
        t.join(10)
    assert answers["first"][0] == answers["second"][0]
    assert sorted(created for _, created in answers.values()) == [False, True]
    assert found == {"first": True, "second": True}
    assert len(_dag_hashes(r)) == 1


def test_a_key_that_expires_while_it_is_claimed_still_makes_one_dag(server) -> None:
    """The key lapses between a creator's failed ``SET NX`` and its ``GET`` and a third
    creator claims it meanwhile: the second must answer with the third's DAG, not its own."""
    r = fakeredis.FakeRedis(server=server)
    store = DagStore(r)
    store.create("first", {"goal": "g"}, idempotency_key="k")
    idem = Keys().idem("dag:k")
    get = r.get
    answers: dict[str, tuple[str, bool]] = {}

    def lapsing_get(name: Any) -> Any:
        if name == idem and "third" not in answers:
            r.delete(idem)  # it expired…
            answers["third"] = store.create("third", {"goal": "g"}, idempotency_key="k")  # …and was claimed
            return None
        return get(name)

    r.get = lapsing_get  # type: ignore[method-assign]
    second = store.create("second", {"goal": "g"}, idempotency_key="k")
    assert answers["third"] == ("third", True)
    assert second == ("third", False)
    assert sorted(_dag_hashes(r)) == [Keys().dag("first").encode(), Keys().dag("third").encode()]


# -- Python door ----------------------------------------------------------------------------

def test_submit_stores_and_enqueues_start(dags: tuple[DagDispatcher, Sent]) -> None:
    d, sent = dags
    handle = d.submit(DagRequest(goal="g", steps=[PlanStepIn(id="a", task="t")]))
    assert sent == [("reactq.dag.start", [handle.dag_id])]
    assert handle.status()["status"] == "queued"


def test_an_idempotency_key_returns_the_same_dag_and_enqueues_once(dags: tuple[DagDispatcher, Sent]) -> None:
    d, sent = dags
    first = d.submit(DagRequest(goal="g", idempotency_key="k1"))
    second = d.submit(DagRequest(goal="g", idempotency_key="k1"))
    assert first.dag_id == second.dag_id and not second.created and len(sent) == 1


@pytest.mark.parametrize(("steps", "field", "message"), [
    ([("a", ["b"]), ("b", ["a"])], "steps", "Circular dependency detected among steps: ['a', 'b']"),
    ([("a", []), ("a", [])], "steps", "repeated: ['a']"),
    ([("a", []), ("b", []), ("c", []), ("d", [])], "steps", "at most 3 steps"),
])
def test_bad_plans_are_refused_at_the_door_and_nothing_is_stored(
        dags: tuple[DagDispatcher, Sent], r: fakeredis.FakeRedis, steps: list, field: str,
        message: str) -> None:
    d, sent = dags
    with pytest.raises(RequestError) as info:
        d.submit(DagRequest(goal="g", steps=[PlanStepIn(id=i, task="t", dependencies=deps)
                                             for i, deps in steps]))
    assert info.value.field == field and message in str(info.value)
    assert sent == [] and r.keys("reactq:dag:*") == []


def test_unknown_tools_or_model_are_refused(dags: tuple[DagDispatcher, Sent]) -> None:
    d, _ = dags
    with pytest.raises(RequestError, match="unknown tool names"):
        d.submit(DagRequest(goal="g", tools=["nope"]))
    with pytest.raises(RequestError, match="unknown model"):
        d.submit(DagRequest(goal="g", model="gpt-99"))


def test_cancel_and_interrupt_flag_the_dag_and_nudge_it(dags: tuple[DagDispatcher, Sent]) -> None:
    d, sent = dags
    h = d.submit(DagRequest(goal="g"))
    h.interrupt("also do Z")
    h.cancel()
    assert d.store.cancel_requested(h.dag_id)
    assert [c for _, c in d.store.interrupts_after(h.dag_id, None)] == ["also do Z"]
    assert sent[1:] == [("reactq.dag.advance", [h.dag_id, None])] * 2
    with pytest.raises(RequestError, match="content"):
        h.interrupt("  ")


# -- HTTP -------------------------------------------------------------------------------------

@pytest.fixture
def client(dags: tuple[DagDispatcher, Sent], server: fakeredis.FakeServer) -> TestClient:
    app = FastAPI()
    app.include_router(router)
    errors.install(app)  # the gateway's exception handlers (404s, 422s)
    d, _ = dags
    app.state.gateway = Gateway(d.settings, keepalive=0.05, dags=d,
                                 aredis=fakeredis.aioredis.FakeRedis(server=server))
    return TestClient(app)


def test_post_returns_202_with_the_events_url(client: TestClient, dags: tuple[DagDispatcher, Sent]) -> None:
    res = client.post("/v1/dags", json={"goal": "g", "steps": [{"id": "a", "task": "t"}]})
    assert res.status_code == 202
    body = res.json()
    assert body["events_url"] == f"/v1/dags/{body['dag_id']}/events" and body["created"] is True
    got = client.get(f"/v1/dags/{body['dag_id']}").json()
    assert got["status"] == "queued" and got["steps"][0]["id"] == "a"


def test_a_cyclic_plan_is_a_422_naming_the_steps(client: TestClient) -> None:
    res = client.post("/v1/dags", json={"goal": "g", "steps": [
        {"id": "a", "task": "t", "dependencies": ["b"]}, {"id": "b", "task": "t", "dependencies": ["a"]}]})
    assert res.status_code == 422
    err = res.json()["error"]
    assert err["code"] == "validation_error" and err["field"] == "steps"
    assert "['a', 'b']" in err["message"]


def test_bad_fields_and_unknown_ids_are_422_and_404(client: TestClient) -> None:
    assert client.post("/v1/dags", json={"goal": "g", "max_concurrency": 0}).status_code == 422
    assert client.get("/v1/dags/nope").status_code == 404
    assert client.get("/v1/dags/nope/events").status_code == 404
    assert client.post("/v1/dags/nope/cancel").status_code == 404


def _finished_dag(d: DagDispatcher) -> str:
    h = d.submit(DagRequest(goal="g"))
    state = M.new_dag(h.dag_id, DagRequest(goal="g"), model="smart", now=1.0)
    events = M.start_planning(state).events + M.begin_round(state, ExecutionPlan(goal="g"), env()).events
    d.store.commit(state, 0, events)
    fail = M.fail(state, "Pipeline error: x", env())
    d.store.commit(state, 1, fail.events)
    return h.dag_id


def test_sse_replays_events_with_stream_ids_and_resumes_after_last_event_id(
        client: TestClient, dags: tuple[DagDispatcher, Sent]) -> None:
    dag_id = _finished_dag(dags[0])
    body = client.get(f"/v1/dags/{dag_id}/events").text
    frames = [f for f in body.split("\n\n") if f.strip()]
    ids = [f.split("\n")[0].removeprefix("id: ") for f in frames]
    assert frames[-1].split("\n")[1] == "event: done"
    resumed = client.get(f"/v1/dags/{dag_id}/events", headers={"Last-Event-ID": ids[1]}).text
    assert [f.split("\n")[0] for f in resumed.split("\n\n") if f.strip()] == [f"id: {i}" for i in ids[2:]]
    assert client.get(f"/v1/dags/{dag_id}/events", headers={"Last-Event-ID": "nope"}).status_code == 422


def test_interrupting_an_ended_dag_is_a_409(client: TestClient, dags: tuple[DagDispatcher, Sent]) -> None:
    dag_id = _finished_dag(dags[0])
    assert client.post(f"/v1/dags/{dag_id}/interrupts", json={"content": "more"}).status_code == 409


# -- CLI ---------------------------------------------------------------------------------------

def test_a_plan_file_may_be_a_request_or_a_list_of_steps(tmp_path: Path) -> None:
    full = tmp_path / "full.json"
    full.write_text(json.dumps({"goal": "g", "steps": [{"id": "a", "task": "t"}]}))
    assert load_request(full, None).goal == "g"
    steps = tmp_path / "steps.json"
    steps.write_text(json.dumps([{"id": "a", "task": "t"}]))
    req = load_request(steps, "my goal", tools="slow, echo", max_rounds=2)
    assert (req.goal, req.tools, req.max_rounds, len(req.steps or [])) == ("my goal", ["slow", "echo"], 2, 1)
    assert load_request(None, "just a goal").steps is None


@pytest.mark.parametrize(("content", "goal", "message"), [
    (None, None, "give a plan file"),
    ("[{\"id\": \"a\", \"task\": \"t\"}]", None, "has no goal"),
    ("{not json", "g", "is not JSON"),
    ("{\"goal\": \"g\", \"max_rounds\": 9}", None, "max_rounds"),
])
def test_unusable_input_is_a_usage_error(tmp_path: Path, content: str | None, goal: str | None,
                                         message: str) -> None:
    plan = None
    if content is not None:
        plan = tmp_path / "plan.json"
        plan.write_text(content)
    with pytest.raises(UsageError, match=message):
        load_request(plan, goal)


def test_the_steps_table_shows_status_model_run_and_result() -> None:
    from rich.console import Console

    table = steps_table({"dag_id": "d1", "status": "running", "phase": "executing", "round": 1,
                         "steps": [{"id": "A", "task": "fetch", "status": "completed", "model": "fast",
                                    "run_id": "abcdef1234567890", "duration": 1.25, "result": "rows: 3"},
                                   {"id": "B", "task": "count", "status": "running", "started_at": 10.0}]},
                        now=12.0)
    console = Console(record=True, width=120)
    console.print(table)
    text = console.export_text()
    assert "completed" in text and "abcdef123456" in text and "1.2s" in text and "rows: 3" in text
    assert "running" in text and "2.0s" in text and "count" in text


def test_two_children_ending_at_once_launch_their_dependent_exactly_once(r: fakeredis.FakeRedis) -> None:
    """Two workers load the same version; each sees only its own child finished. The second
    save loses the compare-and-set, reloads, and only then launches D — once."""
    store = DagStore(r)
    store.create("d1", {"goal": "g"})
    ids = iter(["run-b", "run-c", "run-d", "run-d2"])
    e = M.Env(config=DagConfig(), now=100.0, model_for=lambda h: "general", new_id=lambda: next(ids))
    state = M.new_dag("d1", DagRequest(goal="g"), model="smart", now=1.0)
    plan = ExecutionPlan(goal="g", steps=[PlanStep(id="B", task="b"), PlanStep(id="C", task="c"),
                                          PlanStep(id="D", task="d", dependencies=["B", "C"])])
    assert store.commit(state, 0, M.begin_round(state, plan, e).events)
    ok = {"status": "succeeded", "result": {"answer": "x", "usage": {}}}

    launched: list[str] = []

    def worker(step_id: str, run_id: str, rec_state: Any, version: int) -> bool:
        t = M.complete_step(rec_state, step_id, run_id, ok, e)
        if not store.commit(rec_state, version, t.events):
            return False
        launched.extend(x.step_id for x in t.effects if isinstance(x, M.StartRun))
        return True

    first, second = store.load("d1"), store.load("d1")
    assert worker("B", "run-b", first.state, first.version)
    assert not worker("C", "run-c", second.state, second.version), "stale version refused"
    fresh = store.load("d1")
    assert worker("C", "run-c", fresh.state, fresh.version)
    assert launched == ["D"]
    assert [e.data["step_id"] for _, e in store.read_events("d1")
            if e.data.get("event") == "started"] == ["B", "C", "D"]
