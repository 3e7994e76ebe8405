"""A bulk fork under kill -9: 30 lines, each of which charged a card (not idempotent) at
turn 1 and failed at turn 2, are forked from turn 1 by ``reactq batch fork`` while workers
are killed -9 and restarted, and the command itself is killed -9 once and run again. Each
line is forked once; the recorded charge is reused, never run again; the new charge of each
fork ran exactly once or is reported ``uncertain``. Effects are counted from the tools' own
records (``reactq-test:toolruns``), not from the runs' events.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest

from reactq.dispatcher.batch.items import BatchItem
from reactq.dispatcher.batch.store import BatchStore, drive_stored_batch
from reactq.dispatcher.client import Dispatcher
from reactq.shared.requests import RunRequest
from reactq.shared.settings import Settings
from tests.integration.conftest import ROOT, LLMFixture, WorkerFactory, worker_env
from tests.integration.test_approvals_faults import Chaos
from tests.scripted_server import reply_error, reply_text, reply_tool_calls

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(600)]
LINES = 30
DB = 10
KILLS = 8  # then the workers are left alone to finish (a shared, loaded machine restarts them slowly)


class Kills(Chaos):
    """``Chaos`` that stops after ``KILLS`` kills."""

    def run(self) -> None:
        while self.kills < KILLS and not self.stop.wait(self.every):
            victim = self.alive.pop(0)
            victim.kill()
            self.kills += 1
            self.alive.append(self.factory.start(wait=False, concurrency=4))


def _cli(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "dispatcher", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True)


def test_a_bulk_fork_under_kills_forks_each_line_once_and_repeats_no_effect(
        redis_url: str, llm: LLMFixture, backend: Any, tmp_path: Any) -> None:
    url, env = backend.isolated(DB)
    r = backend.client(url)
    if backend.kind != "cluster":
        r.flushdb()
    factory = WorkerFactory(url, llm, tmp_path, env)
    alive = [factory.start(f"forkfault-{n}", wait=False, concurrency=4) for n in range(2)]
    for w in alive:
        factory.wait_ready(w)
    settings = Settings(redis_url=url, model="scripted", tools="tests.integration.tools:TOOLS", demo_tools=True,
                        openai_api_key="k", openai_base_url=llm.server.base_url, **backend.settings(env))
    d = Dispatcher(settings)
    store = BatchStore(d.redis, d.keys, settings.run_ttl_seconds)
    uid = uuid.uuid4().hex[:6]
    queries = [llm.unique(f"fork fault {n}") for n in range(LINES)]
    for n, q in enumerate(queries):  # turn 1 charges, turn 2 fails
        llm.script(q, [reply_tool_calls([("c1", "charge_card", {"tag": f"{uid}-{n}-a", "seconds": 0.1})]),
                       reply_error(400, {"error": {"message": "provider outage"}})])
    items = [BatchItem(n + 1, n + 1, request=RunRequest(query=q, completion_check=False))
             for n, q in enumerate(queries)]
    source = store.create(items, 10)
    store.claim(source, "test")
    drive_stored_batch(d, store, source, "test", threading.Event())
    first = {res["line"]: res for res in store.view(source, with_results=True)["results"]}
    assert Counter(res["status"] for res in first.values()) == Counter({"failed": LINES})

    for n, q in enumerate(queries):  # the outage is over: the fork repeats the charge, then charges anew
        llm.script(q, [reply_tool_calls([("x1", "charge_card", {"tag": f"{uid}-{n}-a", "seconds": 0.1})]),
                       reply_tool_calls([("x2", "charge_card", {"tag": f"{uid}-{n}-b", "seconds": 0.3})]),
                       reply_text("charged")], synthesis=reply_text("charged"))
    cli_env = {**worker_env(url, llm), **env}
    chaos = Kills(factory, alive, every=2.0)
    chaos.start()
    try:
        killed = _cli(cli_env, "batch", "fork", source, "--from", "1", "--json")
        time.sleep(2.0)
        os.killpg(killed.pid, signal.SIGKILL)  # the bulk fork's own process, mid-way
        killed.wait()
        again = _cli(cli_env, "batch", "fork", source, "--from", "1", "--json")
        try:
            out, errs = again.communicate(timeout=420)
        except subprocess.TimeoutExpired:
            os.killpg(again.pid, signal.SIGKILL)
            forked = [k for k in r.scan_iter(match=d.keys.batch("*")) if r.hget(k, "forked_from")]
            views = [store.view(k.decode().split("{")[1].rstrip("}"), with_results=False) for k in forked]
            raise AssertionError(f"the bulk fork did not end: {views}; {again.communicate()[1][-2000:]}") from None
    finally:
        chaos.stop.set()
        chaos.join(10)
        factory.stop_all()
    assert again.returncode in (0, 1), errs
    batch_id = json.loads(out.splitlines()[0])["batch_id"]
    view = store.view(batch_id, with_results=True)
    assert view["status"] == "done" and view["total"] == LINES
    for line, res in first.items():
        forks = r.zrange(d.keys.runs_forked_from(res["run_id"]), 0, -1)
        assert len(forks) == 1, f"line {line} forked {len(forks)} times"
    ran = Counter(json.loads(v)["tag"] for v in r.lrange("reactq-test:toolruns", 0, -1))
    for n in range(LINES):
        assert ran[f"{uid}-{n}-a"] == 1, f"line {n + 1}: the recorded charge ran {ran[f'{uid}-{n}-a']} times"
        assert ran[f"{uid}-{n}-b"] <= 1, f"line {n + 1}: the new charge ran twice"
    lines = {res["line"]: res for res in view["results"]}
    for n in range(LINES):
        run_id = lines[n + 1]["run_id"]
        done = {e.data["tool_call_id"]: e.data for _, e in d.handle(run_id).events(timeout=10)
                if e.channel == "step" and e.data.get("type") == "iteration" and e.data.get("status") == "done"}
        assert done["x1"].get("reused") is True, (run_id, done.get("x1"))
        assert ran[f"{uid}-{n}-b"] == 1 or done["x2"].get("uncertain"), (run_id, done.get("x2"))
    print(f"\n{chaos.kills} workers killed; {sum(1 for n in range(LINES) if ran[f'{uid}-{n}-b'])} new charges ran "
          f"once, the rest uncertain; {LINES} recorded charges reused")
