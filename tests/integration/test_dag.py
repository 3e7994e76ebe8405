"""DAGs on real workers against the scripted LLM server (issue 5).

Every test uses its own Redis database (broker and store), so only its own workers see its
tasks. The workers load a TOML registry whose four models (general, fast, reasoning,
smart) all point at the scripted server under different ``model`` names, so the server's
request log shows which model served which call.

Scripts are keyed by text the prompts are built to contain: the analyzer's first user
message starts ``Goal to evaluate: <goal>``, the planner's (and the synthesis') ``Goal:
<goal>``, and each step's query holds ``Task: <task>``. Goal-level scripts are registered
before step scripts because the book matches substrings in registration order.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from reactq.shared.keys import Keys
from reactq.dispatcher.dag import DagDispatcher
from reactq.shared.errors import RequestError
from reactq.shared.events import Event
from reactq.shared.requests import DagRequest, PlanStepIn
from reactq.shared.settings import Settings
from tests.integration.conftest import Backend, LLMFixture, Worker, WorkerFactory
from tests.scripted_server import Reply, first_user_text, reply_error, reply_text, reply_tool_calls

pytestmark = pytest.mark.integration

MODELS = {"general": "model-general", "fast": "model-fast", "reasoning": "model-reasoning",
          "smart": "model-smart"}


def registry_file(path: Path, base_url: str) -> Path:
    body = "".join(f"""
[models.{name}]
base_url = "{base_url}"
model = "{model}"
roles = ["{name}"]
abilities = {{ tool_call = true, json_mode = true }}
""" for name, model in MODELS.items())
    path.write_text(body)
    return path


class Cluster:
    def __init__(self, dags: DagDispatcher, r: redis.Redis, workers: dict[int, Worker]) -> None:
        self.dags = dags
        self.r = r
        self.workers = workers


def _cluster(backend: Backend, llm: LLMFixture, tmp: Path, db: int,
             layout: list[tuple[str, str, int]]) -> Iterator[Cluster]:
    url, env = backend.isolated(db)
    r = backend.client(url)
    if backend.kind != "cluster":  # a cluster has one database, shared by the session
        r.flushdb()
    models = registry_file(tmp / "models.toml", llm.server.base_url)
    factory = WorkerFactory(url, llm, tmp, env)
    started = [factory.start(name, queues=queues, concurrency=c, wait=False,
                             REACTQ_MODELS=str(models)) for name, queues, c in layout]
    for w in started:
        factory.wait_ready(w)
    settings = Settings(redis_url=url, models=models, tools="tests.integration.tools:TOOLS",
                        openai_api_key="k", demo_tools=True, **backend.settings(env))
    yield Cluster(DagDispatcher(settings), r, {w.proc.pid: w for w in started})
    # All at once: a warm shutdown waits for the task in flight, and these add up.
    for w in started:
        if w.proc.poll() is None:
            os.killpg(w.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    for w in started:
        try:
            w.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.kill()


@pytest.fixture(scope="module")
def dag_cluster(backend: Backend, llm: LLMFixture, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # One worker for runs and DAG tasks, and single-slot tool workers: tool calls that run
    # at once must be on different processes. Three of them, so that a call's duplicate
    # delivery (which waits on the call's lease) cannot hold back the other call.
    yield from _cluster(backend, llm, tmp_path_factory.mktemp("dag"), 12, [
        ("dag-runs", "reactq.runs", 6), ("dag-tools-1", "reactq.tools", 1),
        ("dag-tools-2", "reactq.tools", 1), ("dag-tools-3", "reactq.tools", 1)])


@pytest.fixture
def crash_cluster(backend: Backend, llm: LLMFixture, tmp_path: Path) -> Iterator[Cluster]:
    both = "reactq.runs,reactq.tools"
    yield from _cluster(backend, llm, tmp_path, 13, [
        ("dag-crash-a", both, 2), ("dag-crash-b", both, 2), ("dag-crash-c", both, 2)])


# -- helpers ----------------------------------------------------------------------------------

def script_dag(llm: LLMFixture, goal: str, *, analysis: dict[str, Any],
               plan: list[dict[str, Any]] | None = None, synthesis: str = "final DAG answer",
               analyzer_delay: float = 0.0) -> None:
    llm.script(f"Goal to evaluate: {goal}",
               [reply_text(json.dumps(analysis), delay=analyzer_delay)])
    llm.script(f"Goal: {goal}", [reply_text(json.dumps({"steps": plan or []}))],
               synthesis=reply_text(synthesis))


def script_step(llm: LLMFixture, task: str, turns: list[Reply], result: str) -> None:
    llm.script(f"Task: {task}", turns, synthesis=reply_text(result))


def slow_turns(tag: str, seconds: float) -> list[Reply]:
    return [reply_tool_calls([(f"call-{tag}", "slow", {"tag": tag, "seconds": seconds})]),
            reply_text(f"{tag} finished")]


def requests_containing(llm: LLMFixture, text: str) -> list[dict[str, Any]]:
    return [r.body for r in llm.server.requests if text in first_user_text(r.body)]


def step_requests(llm: LLMFixture, task: str) -> list[dict[str, Any]]:
    """The LLM calls of the child run of the step with this task (not the analyzer's)."""
    return [b for b in requests_containing(llm, f"Task: {task}")
            if "Original goal:" in first_user_text(b)]


def tool_runs(r: redis.Redis, tag: str) -> list[dict[str, Any]]:
    return [x for x in (json.loads(v) for v in r.lrange("reactq-test:toolruns", 0, -1))
            if x["tag"] == tag]


def all_events(c: Cluster, dag_id: str) -> list[Event]:
    events = [e for _, e in c.dags.handle(dag_id).events(timeout=60)]
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "each seq once, in order"
    assert [e.channel for e in events].count("done") == 1 and events[-1].channel == "done"
    return events


def http_client(c: Cluster) -> Any:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from reactq.dispatcher.http import errors
    from reactq.dispatcher.http.dags import router
    from reactq.dispatcher.http.gateway import Gateway

    app = FastAPI()
    app.include_router(router)
    errors.install(app)
    app.state.gateway = Gateway(c.dags.settings, dags=c.dags, keepalive=1.0)
    return TestClient(app)


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def step(status: dict[str, Any], step_id: str) -> dict[str, Any]:
    """The step's entry; an empty one while its round is still being planned."""
    return next((s for s in status["steps"] if s["id"] == step_id), {})


# -- tests ------------------------------------------------------------------------------------

@pytest.mark.core
def test_a_diamond_runs_b_and_c_at_once_on_different_workers_and_d_gets_both_results(
        dag_cluster: Cluster, llm: LLMFixture) -> None:
    uid = uuid.uuid4().hex[:8]
    goal = f"Compare left and right [{uid}]"
    tasks = {k: f"{v} {uid}" for k, v in {"A": "Collect the inputs", "B": "Measure the left side",
                                         "C": "Measure the right side", "D": "Compare both"}.items()}
    script_dag(llm, goal, analysis={"achieved": True, "confidence": 0.9, "reasoning": "complete"},
               synthesis=f"left beats right {uid}")
    script_step(llm, tasks["A"], [reply_text("inputs ready")], f"result-A-{uid}")
    script_step(llm, tasks["B"], slow_turns(f"B-{uid}", 1.0), f"result-B-{uid}")
    script_step(llm, tasks["C"], slow_turns(f"C-{uid}", 1.0), f"result-C-{uid}")
    script_step(llm, tasks["D"], [reply_text("compared")], f"result-D-{uid}")

    handle = dag_cluster.dags.submit(DagRequest(goal=goal, steps=[
        PlanStepIn(id="A", task=tasks["A"]),
        PlanStepIn(id="B", task=tasks["B"], dependencies=["A"], tool_hint="slow", model_hint="fast"),
        PlanStepIn(id="C", task=tasks["C"], dependencies=["A"], tool_hint="slow",
                   model_hint="reasoning"),
        PlanStepIn(id="D", task=tasks["D"], dependencies=["B", "C", "ghost"]),
    ]))
    result = handle.result(timeout=40)
    assert (result["status"], result["achieved"], result["rounds"]) == ("succeeded", True, 1)
    assert result["answer"] == f"left beats right {uid}"

    # B and C overlapped in time, on two different worker processes.
    [b], [c] = tool_runs(dag_cluster.r, f"B-{uid}"), tool_runs(dag_cluster.r, f"C-{uid}")
    assert b["pid"] != c["pid"]
    assert b["started"] < c["ended"] and c["started"] < b["ended"]

    # D's query carries B's and C's results; each step ran as its own child run.
    status = handle.status()
    assert [s["status"] for s in status["steps"]] == ["completed"] * 4
    assert len({s["run_id"] for s in status["steps"]}) == 4
    assert step(status, "D")["result"] == f"result-D-{uid}"
    d_query = dag_cluster.dags.runs.store.load(step(status, "D")["run_id"]).request["query"]
    assert f"result-B-{uid}" in d_query and f"result-C-{uid}" in d_query
    assert d_query.startswith(f"Original goal: {goal}\n\nTask: {tasks['D']}")

    # model_hint routes each step to its role's model; the smart model analyzes.
    def models_for(task: str) -> set[str]:
        return {body["model"] for body in step_requests(llm, task)}
    assert models_for(tasks["A"]) == {"model-general"}
    assert models_for(tasks["B"]) == {"model-fast"}
    assert models_for(tasks["C"]) == {"model-reasoning"}
    assert {b["model"] for b in requests_containing(llm, f"Goal to evaluate: {goal}")} == {"model-smart"}
    assert [s["model"] for s in status["steps"]] == ["general", "fast", "reasoning", "general"]

    events = all_events(dag_cluster, handle.dag_id)
    warning = next(e for e in events if e.channel == "warning")
    assert "ghost" in warning.data["message"]
    started = {e.data["step_id"]: e.data["run_id"] for e in events
               if e.channel == "step_progress" and e.data["event"] == "started"}
    assert started == {s["id"]: s["run_id"] for s in status["steps"]}
    progress = [e for e in events if e.channel == "step_progress" and e.data["event"] == "progress"]
    assert {e.data["step_id"] for e in progress} >= {"B", "C"}
    assert "".join(e.data.get("content", "") for e in events if e.channel == "answer") == \
        f"left beats right {uid}"


def test_a_cyclic_plan_is_refused_before_anything_runs(dag_cluster: Cluster, llm: LLMFixture) -> None:
    goal = llm.unique("cyclic plan")
    before = set(dag_cluster.r.keys("reactq:dag:*"))
    with pytest.raises(RequestError, match=r"Circular dependency detected among steps: \['a', 'b'\]"):
        dag_cluster.dags.submit(DagRequest(goal=goal, steps=[
            PlanStepIn(id="a", task="first", dependencies=["b"]),
            PlanStepIn(id="b", task="second", dependencies=["a"]),
            PlanStepIn(id="c", task="third", dependencies=["a"])]))
    assert set(dag_cluster.r.keys("reactq:dag:*")) == before
    assert requests_containing(llm, goal) == []


def test_a_failing_step_fails_exactly_its_dependents(dag_cluster: Cluster, llm: LLMFixture) -> None:
    uid = uuid.uuid4().hex[:8]
    goal = f"Partial work [{uid}]"
    script_dag(llm, goal, analysis={"achieved": False, "confidence": 0.9, "reasoning": "B broke"})
    for sid in "ACE":
        script_step(llm, f"step {sid} {uid}", [reply_text("ok")], f"out-{sid}")
    script_step(llm, f"step B {uid}", [reply_error(400, {"error": {"message": "bad request"}})], "-")
    script_step(llm, f"step D {uid}", [reply_text("ok")], "out-D")
    deps = {"A": [], "B": ["A"], "C": ["A"], "D": ["B"], "E": ["C"]}
    handle = dag_cluster.dags.submit(DagRequest(goal=goal, max_rounds=1, steps=[
        PlanStepIn(id=k, task=f"step {k} {uid}", dependencies=v) for k, v in deps.items()]))
    result = handle.result(timeout=30)
    status = handle.status()
    assert {s["id"]: s["status"] for s in status["steps"]} == {
        "A": "completed", "B": "failed", "C": "completed", "D": "failed", "E": "completed"}
    assert step(status, "B")["result"].startswith("LLMError")
    assert step(status, "D")["result"] == "Skipped: dependency step 'B' failed"
    assert step(status, "D")["run_id"] is None and step_requests(llm, f"step D {uid}") == []
    run_b = dag_cluster.dags.runs.store.status(step(status, "B")["run_id"])
    assert run_b["status"] == "failed"
    assert result["achieved"] is False and result["status"] == "succeeded"
    assert result["answer"] == "**A**: out-A\n\n---\n\n**C**: out-C\n\n---\n\n**E**: out-E"


def test_a_low_confidence_analysis_replans_until_three_rounds(dag_cluster: Cluster,
                                                              llm: LLMFixture) -> None:
    uid = uuid.uuid4().hex[:8]
    goal = f"Find the answer [{uid}]"
    task = f"Look it up {uid}"
    script_dag(llm, goal, plan=[{"id": "s1", "task": task}],
               analysis={"achieved": False, "confidence": 0.3, "reasoning": "not sure yet"})
    script_step(llm, task, [reply_text("found something")], f"maybe-{uid}")
    # Through the HTTP routes this time.
    http = http_client(dag_cluster)
    created = http.post("/v1/dags", json={"goal": goal})
    assert created.status_code == 202
    handle = dag_cluster.dags.handle(created.json()["dag_id"])
    result = handle.result(timeout=40)
    assert (result["rounds"], result["achieved"], result["confidence"]) == (3, False, 0.3)
    assert result["answer"] == f"**s1**: maybe-{uid}"

    planner_calls = [b for b in requests_containing(llm, f"Goal: {goal}") if not b.get("stream")]
    assert len(planner_calls) == 3
    assert all(b["model"] == "model-smart" for b in planner_calls)
    contexts = [first_user_text(b) for b in planner_calls]
    assert "--- Round 1 ---" not in contexts[0]
    assert "--- Round 1 ---" in contexts[1] and "--- Round 2 ---" in contexts[2]
    assert contexts[2].endswith("Please create a revised plan that addresses the gaps identified above.")
    assert len(requests_containing(llm, f"Goal to evaluate: {goal}")) == 3

    events = all_events(dag_cluster, handle.dag_id)
    replans = [e.data for e in events if e.channel == "phase" and e.data["name"] == "replanning"]
    assert [d["round"] for d in replans] == [2, 3]
    status = http.get(f"/v1/dags/{handle.dag_id}").json()
    assert status["round"] == 3 and len(status["rounds"]) == 3 and status["status"] == "succeeded"
    assert len({r["steps"][0]["run_id"] for r in status["rounds"]}) == 3
    ids = [i for i, _ in dag_cluster.dags.store.read_events(handle.dag_id)]
    sse = http.get(created.json()["events_url"], headers={"Last-Event-ID": ids[-3]}).text
    assert [line for line in sse.split("\n") if line.startswith(("id:", "event:"))] == [
        f"id: {ids[-2]}", "event: phase", f"id: {ids[-1]}", "event: done"]


def _live_holder(c: Cluster, member: str) -> int | None:
    """The pid of the live worker holding ``member``'s lease (a dead one's record may linger
    until someone takes the lease over)."""
    raw = c.r.hget(Keys().lease_tasks_for(member), member)
    if not raw:
        return None
    pid = int(json.loads(raw)["worker"].rsplit(":", 1)[1])
    worker = c.workers.get(pid)
    return pid if worker is not None and worker.proc.poll() is None else None


@pytest.mark.faults  # workers killed with -9 and replaced mid-DAG: the fault tier
def test_killing_workers_mid_dag_still_finishes_it_with_each_step_run_once(
        crash_cluster: Cluster, llm: LLMFixture) -> None:
    c = crash_cluster
    uid = uuid.uuid4().hex[:8]
    goal = f"Survive crashes [{uid}]"
    script_dag(llm, goal, analysis={"achieved": True, "confidence": 0.95, "reasoning": "done"},
               synthesis=f"survived {uid}", analyzer_delay=2.0)
    script_step(llm, f"Slow work {uid}", slow_turns(f"crash-A-{uid}", 2.0), f"A-{uid}")
    script_step(llm, f"Follow up {uid}", [reply_text("ok")], f"B-{uid}")
    handle = c.dags.submit(DagRequest(goal=goal, steps=[
        PlanStepIn(id="A", task=f"Slow work {uid}"),
        PlanStepIn(id="B", task=f"Follow up {uid}", dependencies=["A"])]))

    # Kill the worker running step A's tool, then the one analyzing the DAG.
    run_a = wait_for(lambda: step(handle.status(), "A").get("run_id"), what="step A to start")
    member = f"tool:{run_a}:call-crash-A-{uid}"
    c.workers[wait_for(lambda: _live_holder(c, member), what="A's tool")].kill()
    wait_for(lambda: requests_containing(llm, f"Goal to evaluate: {goal}"), what="the analyzer")
    c.workers[wait_for(lambda: _live_holder(c, f"dag:{handle.dag_id}"), what="the DAG lease")].kill()

    result = handle.result(timeout=40)
    assert (result["status"], result["achieved"], result["answer"]) == ("succeeded", True, f"survived {uid}")
    assert len(tool_runs(c.r, f"crash-A-{uid}")) == 1, "the killed tool call completed once"
    status = handle.status()
    assert [s["status"] for s in status["steps"]] == ["completed", "completed"]
    children = [rid.decode() for rid in c.r.zrange("reactq:runs", 0, -1)]
    mine = [rid for rid in children
            if c.dags.runs.store.load(rid).request["metadata"].get("_dag", {}).get("dag_id") == handle.dag_id]
    assert sorted(mine) == sorted(s["run_id"] for s in status["steps"]), "one child run per step"
    assert len(requests_containing(llm, f"Goal to evaluate: {goal}")) == 2  # asked again once
    events = all_events(c, handle.dag_id)
    completed = [e.data["step_id"] for e in events
                 if e.channel == "step_progress" and e.data["event"] == "completed"]
    assert completed == ["A", "B"]


@pytest.mark.core
def test_cancel_stops_running_steps_and_skips_pending_ones(dag_cluster: Cluster, llm: LLMFixture) -> None:
    uid = uuid.uuid4().hex[:8]
    goal = f"Cancel me [{uid}]"
    script_dag(llm, goal, analysis={"achieved": True, "confidence": 1.0, "reasoning": "-"})
    # The slow tool records itself when it ends: a second, longer call is still running when
    # the cancel comes (with one call, the run's last turn and answer could finish first).
    script_step(llm, f"Long {uid}", [
        reply_tool_calls([(f"call-{uid}-1", "slow", {"tag": f"long-{uid}", "seconds": 0.2})]),
        *slow_turns(f"longer-{uid}", 3.0)], "never")
    handle = dag_cluster.dags.submit(DagRequest(goal=goal, steps=[
        PlanStepIn(id="A", task=f"Long {uid}"),
        PlanStepIn(id="B", task=f"After {uid}", dependencies=["A"])]))
    wait_for(lambda: tool_runs(dag_cluster.r, f"long-{uid}"), what="A's first tool call to end")
    handle.cancel()
    result = handle.result(timeout=10)
    assert result["status"] == "cancelled"
    status = handle.status()
    assert {s["id"]: s["status"] for s in status["steps"]} == {"A": "failed", "B": "skipped"}
    run_a = dag_cluster.dags.runs.handle(step(status, "A")["run_id"])
    assert run_a.result(timeout=10)["status"] == "cancelled"
    assert requests_containing(llm, f"Goal to evaluate: {goal}") == []


def test_a_follow_up_skips_steps_not_started_and_replans_with_it(dag_cluster: Cluster,
                                                                  llm: LLMFixture) -> None:
    uid = uuid.uuid4().hex[:8]
    goal = f"Write a summary [{uid}]"
    script_dag(llm, goal, plan=[{"id": "C", "task": f"Cover the follow-up {uid}"}],
               analysis={"achieved": True, "confidence": 0.9, "reasoning": "covered"},
               synthesis=f"summary with Z {uid}")
    script_step(llm, f"Draft {uid}", slow_turns(f"draft-{uid}", 1.5), f"draft-{uid}")
    script_step(llm, f"Polish {uid}", [reply_text("ok")], "polished")
    script_step(llm, f"Cover the follow-up {uid}", [reply_text("ok")], f"Z covered {uid}")
    handle = dag_cluster.dags.submit(DagRequest(goal=goal, steps=[
        PlanStepIn(id="A", task=f"Draft {uid}"),
        PlanStepIn(id="B", task=f"Polish {uid}", dependencies=["A"])]))
    wait_for(lambda: step(handle.status(), "A").get("status") == "running", what="A to run")
    handle.interrupt("also mention Z")
    result = handle.result(timeout=30)
    assert (result["status"], result["rounds"], result["answer"]) == ("succeeded", 2, f"summary with Z {uid}")
    rounds = handle.status()["rounds"]
    assert {s["id"]: (s["status"], s["result"]) for s in rounds[0]["steps"]} == {
        "A": ("completed", f"draft-{uid}"), "B": ("skipped", "Skipped — user changed requirements")}
    assert step_requests(llm, f"Polish {uid}") == []
    [planner] = [b for b in requests_containing(llm, f"Goal: {goal}") if not b.get("stream")]
    assert "Follow-up from the user: also mention Z" in first_user_text(planner)
    events = all_events(dag_cluster, handle.dag_id)
    inject = next(e for e in events if e.channel == "inject")
    assert inject.data == {"seq": inject.seq, "type": "inject", "content": "also mention Z",
                           "phase": "executing"}


def test_the_cli_runs_a_plan_file_and_refuses_a_cycle(dag_cluster: Cluster, llm: LLMFixture,
                                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import typer
    from typer.testing import CliRunner

    from reactq.dispatcher.cli.dags import dag

    s = dag_cluster.dags.settings
    for name, value in {"REACTQ_REDIS_URL": s.redis_url, "REACTQ_MODELS": str(s.models),
                        "REACTQ_TOOLS": s.tools, "OPENAI_API_KEY": "k", "REACTQ_DEMO_TOOLS": "true"}.items():
        monkeypatch.setenv(name, str(value))
    app = typer.Typer()
    app.command()(dag)
    uid = uuid.uuid4().hex[:8]
    goal = f"CLI plan [{uid}]"
    script_dag(llm, goal, analysis={"achieved": True, "confidence": 0.9, "reasoning": "ok"},
               synthesis=f"cli answer {uid}")
    script_step(llm, f"Only step {uid}", [reply_text("ok")], "done")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([{"id": "only", "task": f"Only step {uid}"}]))
    ok = CliRunner().invoke(app, [str(plan), "--goal", goal])
    assert ok.exit_code == 0, ok.output
    assert f"cli answer {uid}" in ok.output and "completed" in ok.output

    as_json = CliRunner().invoke(app, [str(plan), "--goal", goal, "--json"])
    lines = [json.loads(line) for line in as_json.stdout.splitlines() if line.startswith("{")]
    assert as_json.exit_code == 0 and lines[-1]["event"] == "done"

    plan.write_text(json.dumps({"goal": goal, "steps": [{"id": "a", "task": "x", "dependencies": ["a"]}]}))
    refused = CliRunner().invoke(app, [str(plan)])
    assert refused.exit_code == 2 and "Circular dependency" in refused.output
