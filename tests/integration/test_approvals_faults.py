"""Approvals under faults: 50 runs, each with a non-idempotent call a person must approve;
every approval is decided twice at once by racing clients while workers are killed -9 and
restarted. No call runs twice; every run ends; each call ran exactly once or is reported
``uncertain`` (its worker died mid-call, and the tool is not idempotent).
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from reactq.dispatcher.client import Dispatcher
from reactq.shared.errors import ApprovalConflict
from reactq.shared.requests import RunRequest
from reactq.shared.settings import Settings
from tests.integration.conftest import LLMFixture, Worker, WorkerFactory
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(600)]
RUNS = 50
DB = 11


class Chaos(threading.Thread):
    """Kills a worker (-9) every ``every`` seconds and starts a new one in its place."""

    def __init__(self, factory: WorkerFactory, alive: list[Worker], every: float = 2.5) -> None:
        super().__init__(daemon=True)
        self.factory, self.alive, self.every = factory, alive, every
        self.stop = threading.Event()
        self.kills = 0

    def run(self) -> None:
        while not self.stop.wait(self.every):
            victim = random.choice(self.alive)
            victim.kill()
            self.kills += 1
            self.alive.remove(victim)
            self.alive.append(self.factory.start(wait=False, concurrency=4))


def _decide_twice(deciders: list[Dispatcher], run_id: str, approval: dict[str, Any]) -> list[str]:
    """Both clients decide at the same moment; returns what each got."""
    barrier = threading.Barrier(len(deciders))

    def one(d: Dispatcher) -> str:
        barrier.wait()
        try:
            return d.handle(run_id).decide(approval["approval_id"], "approve",
                                           args_digest=approval["args_digest"])["status"]
        except ApprovalConflict:
            return "conflict"

    with ThreadPoolExecutor(len(deciders)) as pool:
        return list(pool.map(one, deciders))


def test_racing_decisions_and_kills_never_run_an_approved_call_twice(redis_url: str, llm: LLMFixture,
                                                                     backend: Any, tmp_path: Any) -> None:
    url, env = backend.isolated(DB)
    r = backend.client(url)
    if backend.kind != "cluster":
        r.flushdb()
    factory = WorkerFactory(url, llm, tmp_path, env)
    alive = [factory.start(f"fault-{n}", wait=False, concurrency=4) for n in range(2)]
    for w in alive:
        factory.wait_ready(w)
    settings = Settings(redis_url=url, model="scripted", tools="tests.integration.tools:TOOLS", demo_tools=True,
                        openai_api_key="k", openai_base_url=llm.server.base_url, **backend.settings(env))
    deciders = [Dispatcher(settings), Dispatcher(settings)]
    d = deciders[0]
    chaos = Chaos(factory, alive)
    try:
        # Given 50 runs whose one call waits for approval, while workers keep dying
        tags = {}
        for n in range(RUNS):
            tag = f"fault-{n}-{uuid.uuid4().hex[:6]}"
            q = llm.script(llm.unique(f"approval fault {n}"), [
                reply_tool_calls([("t1", "transfer", {"tag": tag, "amount": n, "seconds": 0.3})]),
                reply_text("paid")], synthesis=reply_text("paid"))
            tags[d.submit(RunRequest(query=q, completion_check=False)).run_id] = tag
        chaos.start()
        pending: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + 180
        while len(pending) < RUNS and time.monotonic() < deadline:
            for run_id in tags:
                if run_id not in pending:
                    got = d.approvals.for_run(run_id)
                    if got:
                        pending[run_id] = got[0]
            time.sleep(0.2)
        missing = {run_id: (d.handle(run_id).status()["status"], d.store.ledger_get(run_id, "t1"))
                   for run_id in tags if run_id not in pending}
        assert not missing, f"runs that never asked for approval: {missing}"
        print(f"\nall {RUNS} waiting after {chaos.kills} kills", flush=True)

        # When every approval is decided twice at once
        answers = Counter()
        for run_id, approval in pending.items():
            answers.update(_decide_twice(deciders, run_id, approval))
        assert answers == Counter({"approved": RUNS, "conflict": RUNS}), answers

        # Then every run ends, and no call ran twice
        statuses = {run_id: d.handle(run_id).result(timeout=240)["status"] for run_id in tags}
        print(f"all {RUNS} ended after {chaos.kills} kills", flush=True)
    finally:
        chaos.stop.set()
        chaos.join(10)
        factory.stop_all()
    assert set(statuses.values()) == {"succeeded"}, Counter(statuses.values())
    ran = Counter(json.loads(v)["tag"] for v in r.lrange("reactq-test:toolruns", 0, -1))
    assert max(ran.values(), default=0) <= 1, [t for t, n in ran.items() if n > 1]
    for run_id, tag in tags.items():
        done = [e.data for _, e in d.handle(run_id).events(timeout=10)
                if e.channel == "step" and e.data.get("type") == "iteration" and e.data.get("status") == "done"]
        assert len(done) == 1
        assert ran[tag] == 1 or done[0].get("uncertain"), (run_id, tag, done[0])
        if not done[0].get("uncertain"):
            assert done[0]["approval"] == "approved"
    print(f"\n{chaos.kills} workers killed; {sum(ran.values())} calls ran once, "
          f"{RUNS - sum(ran.values())} uncertain")
