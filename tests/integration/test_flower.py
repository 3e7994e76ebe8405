"""Issue 6: a real Flower process watches the test broker; reactq's tasks show up in its API
by run id, with nothing in their arguments but ids."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reactq.shared.redisconn import free_port
from reactq.shared.requests import RunRequest
from tests.integration.conftest import ROOT
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = pytest.mark.integration


class Flower:
    def __init__(self, port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.proc = proc
        self.log = log

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.base + path, timeout=10) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def json(self, path: str) -> Any:
        status, body = self.get(path)
        assert status == 200, (path, status, body[:300])
        return json.loads(body)

    def text(self, path: str) -> str:
        status, body = self.get(path)
        assert status == 200, (path, status, body[:300])
        return body.decode()


def _wait(check: Callable[[], Any], timeout: float, what: str, flower: Flower) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (OSError, AssertionError, ValueError) as exc:
            last = exc
        else:
            if last:
                return last
        if flower.proc.poll() is not None:
            break
        time.sleep(0.25)
    raise AssertionError(f"{what} (last: {last!r})\n{flower.log.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module")
def flower(redis_url: str, workers: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flower]:
    port = free_port()
    log = tmp_path_factory.mktemp("flower") / "flower.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REACTQ_", "OPENAI_", "FLOWER_"))}
    env.update(REACTQ_REDIS_URL=redis_url, FLOWER_UNAUTHENTICATED_API="true",
               PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "celery", "-A", "reactq.workers.app", "flower", f"--port={port}",
           "--address=127.0.0.1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    f = Flower(port, proc, log)
    try:
        _wait(lambda: f.get("/healthcheck")[0] == 200, 30, "Flower did not answer /healthcheck", f)
        # Flower sees only the events sent after its receiver connected: wait until worker
        # heartbeats (every 2 s) arrive, so the run's task events are not missed.
        _wait(lambda: re.search(r'^flower_worker_online\{worker="alpha@.*\} 1', f.text("/metrics"), re.M),
              30,
              "Flower received no worker heartbeat", f)
        yield f
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _tasks_of(flower: Flower, run_id: str, taskname: str | None = None) -> dict[str, dict[str, Any]]:
    path = "/api/tasks" + (f"?taskname={taskname}" if taskname else "")
    return {uuid: t for uuid, t in flower.json(path).items() if run_id in str(t.get("args"))}


def test_flower_shows_a_runs_tasks_by_run_id_and_no_history(flower, workers, dispatcher, llm):
    secret_query = llm.unique("flower: the secret question is what 9*9 is")
    llm.script(secret_query, [
        reply_tool_calls([("fl1", "calculator", {"expression": "9*9"})]),
        reply_text("81"),
    ], synthesis=reply_text("It is 81."))
    handle = dispatcher.submit(RunRequest(query=secret_query))
    assert handle.result(timeout=30)["status"] == "succeeded"
    rid = handle.run_id

    # The loop's tasks, filtered by name, found by the run id in their args.
    iterate = _wait(lambda: _tasks_of(flower, rid, "reactq.iterate"), 20,
                    "no reactq.iterate task of the run in Flower", flower)
    assert all(t["name"] == "reactq.iterate" for t in iterate.values())

    def all_done() -> dict[str, dict[str, Any]]:
        tasks = _tasks_of(flower, rid)
        names = {t["name"] for t in tasks.values()}
        done = all(t["state"] == "SUCCESS" for t in tasks.values())
        return tasks if done and {"reactq.iterate", "reactq.tool", "reactq.answer"} <= names else {}

    tasks = _wait(all_done, 20, "the run's iterate, tool and answer tasks did not all succeed", flower)
    # Flower's search box (and API) finds them by the run id alone.
    found = flower.json(f"/api/tasks?search={rid}")
    assert set(found) == set(tasks)
    tool = next(t for t in tasks.values() if t["name"] == "reactq.tool")
    assert "fl1" in tool["args"]  # run id, step and the tool call's id
    assert {t["worker"].split("@")[0] for t in tasks.values()} <= {"alpha", "beta"}

    # Nothing but ids: neither the query nor any part of a message history or answer.
    everything = flower.json("/api/tasks")
    for t in everything.values():
        shown = " ".join(str(t.get(k)) for k in ("args", "kwargs", "result"))
        assert secret_query not in shown
        assert "It is 81." not in shown
        assert "'role'" not in shown and '"role"' not in shown
        assert len(str(t.get("args"))) < 200

    # Workers, refreshed over the broker's control channel.
    names = _wait(lambda: set(flower.json("/api/workers?refresh=1")), 20, "no workers listed", flower)
    assert {n.split("@")[0] for n in names} >= {"alpha", "beta"}

    # Flower's own Prometheus metrics count the run's task events.
    metrics = flower.text("/metrics")
    assert 'task="reactq.iterate"' in metrics
    assert 'task="reactq.tool"' in metrics
    assert "flower_events_total" in metrics
