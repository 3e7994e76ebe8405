"""The CLI's one exit-code table (0 ok, 1 did not succeed, 2 usage or not found, 130
interrupted), command by command, against the test Redis, the session's workers and the
scripted LLM; and the commands added with it: ``reactq runs``, ``reactq dag status | watch |
cancel``, ``reactq batch status | cancel``. In-process (typer's runner): the commands are
thin, and an interpreter start-up per case would only slow the suite down."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from reactq.shared.requests import DagRequest, RunRequest
from tests.integration.test_cli import calculator_script, in_process
from tests.integration.test_dag import script_dag, script_step
from tests.scripted_server import reply_error, reply_text, reply_tool_calls

pytestmark = pytest.mark.integration


@pytest.fixture
def env(redis_url, llm, workers) -> dict[str, str]:
    from tests.integration.conftest import worker_env

    return worker_env(redis_url, llm, COLUMNS="160")


@pytest.fixture
def gateway(settings) -> Iterator[Any]:
    """The gateway app in this process (it drives HTTP batches in its own threads)."""
    from fastapi.testclient import TestClient

    from reactq.dispatcher.http import create_app

    with TestClient(create_app(settings)) as http:
        yield http


def finished_run(dispatcher: Any, llm: Any, text: str) -> str:
    handle = dispatcher.submit(RunRequest(query=calculator_script(llm, text)))
    assert handle.result(timeout=30)["status"] == "succeeded"
    return handle.run_id


def slow_run(dispatcher: Any, llm: Any, text: str, seconds: float = 5) -> str:
    q = llm.script(llm.unique(text), [reply_tool_calls([("c1", "slow", {"tag": "cli-exit", "seconds": seconds})]),
                                      reply_text("never")])
    return dispatcher.submit(RunRequest(query=q)).run_id


@pytest.mark.parametrize("args", [
    ["status", "no-such-run"], ["watch", "no-such-run"], ["cancel", "no-such-run"],
    ["interrupt", "no-such-run", "hello"], ["thread", "no-such-thread"],
    ["dag", "status", "no-such-dag"], ["dag", "watch", "no-such-dag"], ["dag", "cancel", "no-such-dag"],
    ["batch", "status", "no-such-batch"], ["batch", "cancel", "no-such-batch"], ["batch-cancel", "no-such-batch"],
])
def test_an_id_that_names_nothing_exits_2_for_every_command(env, args):
    res = in_process(*args, env=env)
    assert res.exit_code == 2, res.output
    assert "no " in res.stderr and "(it may have expired)" in res.stderr


@pytest.mark.parametrize("args", [
    ["runs", "--status", "sleeping"], ["runs", "--batch", "not an id!"], ["runs", "--limit", "0"],
    ["runs", "--cursor", "garbage"], ["dag", "status", "bad id!"], ["batch", "cancel", "bad id!"],
])
def test_bad_usage_exits_2(env, args):
    res = in_process(*args, env=env)
    assert res.exit_code == 2, res.output


def test_a_run_that_ended_cancel_is_0_interrupt_is_1_watch_says_how_it_ended(env, llm, dispatcher):
    ok = finished_run(dispatcher, llm, "cli exit: succeeded")
    res = in_process("cancel", ok, env=env)
    assert res.exit_code == 0 and "already ended (succeeded)" in res.stderr
    res = in_process("cancel", ok, "--json", env=env)
    assert res.exit_code == 0 and json.loads(res.stdout) == {"run_id": ok, "status": "succeeded"}
    res = in_process("interrupt", ok, "too late", env=env)
    assert res.exit_code == 1 and "already ended" in res.stderr
    assert in_process("watch", ok, env=env).exit_code == 0

    bad = dispatcher.submit(RunRequest(query=llm.script(llm.unique("cli exit: the model refuses"), [
        reply_error(400, {"error": {"message": "bad request"}})])))
    bad.result(timeout=30)
    assert in_process("watch", bad.run_id, "--json", env=env).exit_code == 1
    assert in_process("status", bad.run_id, env=env).exit_code == 0  # shown


def test_cancel_wait_and_json_on_a_running_run(env, llm, dispatcher):
    run_id = slow_run(dispatcher, llm, "cli exit: cancel --wait")
    res = in_process("interrupt", run_id, "metric units please", "--json", env=env)
    assert res.exit_code == 0 and json.loads(res.stdout)["run_id"] == run_id
    res = in_process("cancel", run_id, "--wait", "--json", env=env)
    assert res.exit_code == 0 and json.loads(res.stdout) == {"run_id": run_id, "status": "cancelled"}
    assert in_process("watch", run_id, env=env).exit_code == 1


def test_runs_lists_newest_first_with_filters_and_pages(env, llm, dispatcher, monkeypatch):
    thread_id = f"cli-runs-{time.time_ns()}"
    first = dispatcher.submit(RunRequest(query=calculator_script(llm, "cli runs: one"), thread_id=thread_id))
    first.result(timeout=30)
    second = dispatcher.submit(RunRequest(query=calculator_script(llm, "cli runs: two"), thread_id=thread_id))
    second.result(timeout=30)
    res = in_process("runs", "--thread", thread_id, "--json", env=env)
    assert res.exit_code == 0, res.output
    page = json.loads(res.stdout)
    assert [r["run_id"] for r in page["runs"]] == [second.run_id, first.run_id]
    res = in_process("runs", "--thread", thread_id, "--limit", "1", "--json", env=env)
    one = json.loads(res.stdout)
    assert [r["run_id"] for r in one["runs"]] == [second.run_id] and one["next_cursor"]
    rest = json.loads(in_process("runs", "--thread", thread_id, "--cursor", one["next_cursor"], "--json",
                                 env=env).stdout)
    assert [r["run_id"] for r in rest["runs"]] == [first.run_id] and rest["next_cursor"] is None
    # The CLI's console takes its width once, when first imported (80 columns unless COLUMNS was
    # set then, whichever test imported it): wide here, so that "succeeded" is not cut to "succee…".
    from reactq.dispatcher.cli import common

    monkeypatch.setattr(common.out, "_width", 200)
    res = in_process("runs", "--status", "succeeded", "--limit", "50", env=env)
    assert res.exit_code == 0, res.output
    [row] = [line for line in res.stdout.splitlines() if second.run_id in line]
    assert "succeeded" in row, res.stdout


def test_dag_status_watch_and_cancel(env, llm, settings):
    from reactq.dispatcher.dag import DagDispatcher

    dags = DagDispatcher(settings)
    goal, task = llm.unique("cli dag ids"), llm.unique("cli dag ids: step a")
    script_dag(llm, goal, analysis={"achieved": True, "confidence": 0.9, "reasoning": "complete"},
               synthesis="the DAG answer")
    script_step(llm, task, [reply_text("a done")], "step a result")
    done = dags.submit(DagRequest(goal=goal, steps=[{"id": "a", "task": task}]))
    res = in_process("dag", "watch", done.dag_id, "--json", env=env)
    assert res.exit_code == 0, res.output
    assert [json.loads(line)["event"] for line in res.stdout.splitlines()][-1] == "done"
    res = in_process("dag", "status", done.dag_id, "--json", env=env)
    assert res.exit_code == 0 and json.loads(res.stdout)["answer"] == "the DAG answer"
    assert "the DAG answer" in in_process("dag", "status", done.dag_id, env=env).stdout
    res = in_process("dag", "cancel", done.dag_id, env=env)
    assert res.exit_code == 0 and "already ended (succeeded)" in res.stderr

    goal2, slow_task = llm.unique("cli dag ids: cancel"), llm.unique("cli dag ids: slow step")
    script_dag(llm, goal2, analysis={"achieved": True, "confidence": 0.9, "reasoning": "complete"})
    script_step(llm, slow_task, [reply_tool_calls([("s1", "slow", {"tag": "cli-dag", "seconds": 5})]),
                                 reply_text("never")], "never")
    running = dags.submit(DagRequest(goal=goal2, steps=[{"id": "s", "task": slow_task}]))
    deadline = time.monotonic() + 20
    # (No steps are listed until the DAG's start task has run: on a busy machine, a moment.)
    while (running.status()["steps"] or [{}])[0].get("status") != "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    res = in_process("dag", "cancel", running.dag_id, env=env)
    assert res.exit_code == 0 and "cancel requested" in res.stdout
    assert in_process("dag", "watch", running.dag_id, env=env).exit_code == 1  # it ended cancelled


def test_batch_status_and_cancel_act_on_an_http_batch(env, llm, gateway, dispatcher):
    slow_q = llm.script(llm.unique("cli batch: slow line"), [
        reply_tool_calls([("c1", "slow", {"tag": "cli-batch", "seconds": 5})]), reply_text("never")])
    created = gateway.post("/v1/batches", json={"requests": [{"query": slow_q}], "concurrency": 1})
    assert created.status_code == 202, created.text
    batch_id = created.json()["batch_id"]
    res = in_process("batch", "status", batch_id, "--json", env=env)
    assert res.exit_code == 0 and json.loads(res.stdout)["total"] == 1
    res = in_process("batch", "cancel", batch_id, env=env)
    assert res.exit_code == 0 and "cancelling" in res.stdout
    deadline = time.monotonic() + 30
    while gateway.get(f"/v1/batches/{batch_id}").json()["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    ended = gateway.get(f"/v1/batches/{batch_id}").json()["status"]
    assert ended != "running"
    for args in (["batch", "cancel", batch_id], ["batch-cancel", batch_id]):
        res = in_process(*args, env=env)
        assert res.exit_code == 0 and f"already ended ({ended})" in res.stderr
    res = in_process("batch", "cancel", batch_id, "--json", env=env)
    assert json.loads(res.stdout) == {"batch_id": batch_id, "status": ended}
    assert "total" in in_process("batch", "status", batch_id, env=env).stdout
