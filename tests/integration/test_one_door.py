"""Every run comes in by one door (``reactq.shared.service``), through real workers, a real
scheduler and a real gateway: a schedule's ticks and a DAG's steps count in their tenant's
``max_active_runs`` (a tick past it is skipped with ``last_error``; a step waits for room), the
dollar-cap rule covers every model a schedule or DAG may call, the ``RUN_START`` guardrails see
the system prompt, interrupts, a thread's ``inject`` and a DAG's goal, and letting an expired
approval run its call needs ``approvals:write``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import redis

from reactq.dispatcher.client import Dispatcher
from reactq.dispatcher.dag import DagDispatcher
from reactq.dispatcher.schedules import Schedules
from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.errors import RequestError
from reactq.shared.keys import Keys
from reactq.shared.requests import DagRequest, RunRequest
from reactq.shared.schedule.models import ScheduleRequest
from reactq.shared.settings import Settings
from reactq.shared.stores.schedules import ScheduleStore
from reactq.shared.tenancy import owned_name
from tests.integration.conftest import ROOT, Backend, LLMFixture, WorkerFactory, stop_together, worker_env
from tests.integration.test_gateway import start_gateway, stop_gateway
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = pytest.mark.integration
DB = 13
DENIED = "xylophone-secret"
TOKEN = "door-admin-token-8d1e"


def _models(base_url: str) -> str:
    common = f'model = "scripted"\nbase_url = "{base_url}"\nabilities = {{ tool_call = true, json_mode = true }}\n'
    return ("[models.priced]\n" + common + 'roles = ["general", "fast", "smart"]\n'
            "price = { input_per_mtok = 1.0, output_per_mtok = 1.0 }\n"
            "[models.thinker]\n" + common + 'roles = ["reasoning"]\n')


@dataclass
class Door:
    url: str
    settings: Settings
    env: dict[str, str]
    llm: LLMFixture
    tmp: Path

    @property
    def d(self) -> Dispatcher:
        return Dispatcher(self.settings)

    @property
    def r(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    @property
    def keys(self) -> Keys:
        return Keys(self.settings.key_prefix)

    def statuses(self, run_ids: list[str]) -> list[str]:
        pipe = self.r.pipeline()
        for rid in run_ids:
            pipe.hget(self.keys.run(rid), "status")
        return [s.decode() if s else "gone" for s in pipe.execute()]


@pytest.fixture(scope="module")
def door(backend: Backend, llm: LLMFixture, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Door]:
    tmp = tmp_path_factory.mktemp("door")
    url, env = backend.isolated(DB)
    redis.Redis.from_url(url).flushdb()
    (tmp / "models.toml").write_text(_models(llm.server.base_url))
    (tmp / "tenants.toml").write_text("[tenants.pair]\nmax_active_runs = 2\n"
                                      "[tenants.capped]\ncost_per_day_usd = 5.0\n")
    prefix = f"door-{uuid.uuid4().hex[:6]}:"
    env = {**env, "REACTQ_KEY_PREFIX": prefix, "REACTQ_MODELS": str(tmp / "models.toml"),
           "REACTQ_TENANTS": str(tmp / "tenants.toml"), "REACTQ_GUARDRAIL_DENY_WORDS": DENIED,
           "REACTQ_DAG_TICK_SECONDS": "0.5"}
    factory = WorkerFactory(url, llm, tmp, env)
    factory.start("door", concurrency=8)
    log = tmp / "scheduler.log"
    scheduler = subprocess.Popen([sys.executable, "-m", "reactq.dispatcher", "scheduler"], cwd=ROOT,
                                 env=worker_env(url, llm, **env), stdout=log.open("wb"),
                                 stderr=subprocess.STDOUT, start_new_session=True)
    wait_for(lambda: "beat: Acquired lock" in log.read_text(errors="replace"), 60, "the scheduler's lock")
    settings = Settings(redis_url=url, models=tmp / "models.toml", tenants=tmp / "tenants.toml",
                        tools="tests.integration.tools:TOOLS", demo_tools=True, openai_api_key="k",
                        openai_base_url=llm.server.base_url, key_prefix=prefix, **backend.settings(env))
    yield Door(url, settings, env, llm, tmp)
    stop_together([scheduler, *(w.proc for w in factory.started)])


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def most_active(door: Door, ids: Callable[[], list[str]], seconds: float) -> int:
    """The most runs of ``ids()`` active at once, sampled for ``seconds``."""
    most = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        most = max(most, sum(1 for s in door.statuses(ids()) if s not in (*TERMINAL_STATUSES, "gone")))
        time.sleep(0.05)
    return most


# -- schedules ---------------------------------------------------------------------------------

def test_a_schedule_on_an_unpriced_model_of_a_capped_tenant_is_refused(door: Door):
    sid = f"cheap-{uuid.uuid4().hex[:6]}"
    req = ScheduleRequest.model_validate({"schedule_id": sid, "interval_s": 60,
                                          "run": {"query": "q", "model": "thinker"}})
    with pytest.raises(RequestError) as exc:
        Schedules(door.d).create(req, "capped")
    assert exc.value.field == "run.model" and "thinker" in str(exc.value)
    assert ScheduleStore(door.r, door.keys).get(sid, "capped") is None, "nothing stored"


def test_ticks_count_in_max_active_runs_and_a_refused_tick_is_skipped(door: Door, llm: LLMFixture):
    q = llm.script(llm.unique("door: a slow scheduled run"), [reply_text("done", delay=3.0)],
                   synthesis=reply_text("done"))
    sid = f"often-{uuid.uuid4().hex[:6]}"
    schedules = Schedules(door.d)
    schedules.create(ScheduleRequest.model_validate(
        {"schedule_id": sid, "interval_s": 1, "overlap": "allow", "run": {"query": q}}), "pair")
    index = door.keys.runs_schedule(owned_name("pair", sid))
    try:
        def ids() -> list[str]:
            return [m.decode() for m in door.r.zrange(index, 0, -1)]

        wait_for(ids, 30, "the first tick's run")
        assert most_active(door, ids, 6.0) <= 2, "no more of the tenant's runs than its max_active_runs"
        view = schedules.get(sid, "pair")
        assert view["skipped"] >= 1
        assert "max_active_runs" in (view["last_error"] or "")
    finally:
        schedules.delete(sid, "pair")
        for rid in door.r.zrange(index, 0, -1):
            door.d.door.cancel_run(rid.decode())


def test_a_tick_the_cap_rule_refuses_is_skipped_with_last_error(door: Door):
    """A schedule stored before its tenant had a cap (no door checked it): its ticks are refused
    at the door, skipped and counted, ``last_error`` naming the model; no run is made."""
    sid = f"old-{uuid.uuid4().hex[:6]}"
    req = ScheduleRequest.model_validate({"schedule_id": sid, "interval_s": 1,
                                          "run": {"query": "unpriced tick", "model": "thinker"}})
    store = ScheduleStore(door.r, door.keys)
    assert store.create(req, int(time.time()) + 1, "capped")
    try:
        rec = wait_for(lambda: (r := store.get(sid, "capped")) is not None and r.skipped >= 1 and r,
                       30, "a skipped tick")
        assert "thinker" in (rec.last_error or "") and "cost_per_day_usd" in (rec.last_error or "")
        assert not door.r.zrange(door.keys.runs_schedule(owned_name("capped", sid)), 0, -1)
    finally:
        Schedules(door.d).delete(sid, "capped")


# -- DAGs --------------------------------------------------------------------------------------

def test_a_dag_of_a_capped_tenant_reaches_only_priced_models(door: Door):
    dags = DagDispatcher(door.settings)
    hinted = DagRequest(goal="g", steps=[{"id": "a", "task": "t", "model_hint": "reasoning"}])
    with pytest.raises(RequestError, match="thinker"):
        dags.submit(hinted, tenant="capped")
    with pytest.raises(RequestError, match="thinker"):
        dags.submit(DagRequest(goal="g", model="thinker", steps=[{"id": "a", "task": "t"}]), tenant="capped")
    with pytest.raises(RequestError, match="thinker"):
        dags.submit(DagRequest(goal="g"), tenant="capped")  # a planner's steps may name any role
    free = dags.submit(hinted)
    assert free.created, "a tenant without a cap may use it"
    free.cancel()


def test_dag_steps_count_in_max_active_runs_and_wait_for_room(door: Door, llm: LLMFixture):
    uid = uuid.uuid4().hex[:6]
    dags = DagDispatcher(door.settings)
    handles = []
    for n in range(3):
        goal = f"door dag {uid} {n}"
        llm.script(f"Goal to evaluate: {goal}", [reply_text(json.dumps(
            {"achieved": True, "confidence": 0.9, "reasoning": "ok"}))])
        llm.script(f"Goal: {goal}", [reply_text("{}")], synthesis=reply_text(f"answer {n}"))
        steps = []
        for s in "ab":
            task = f"step {s} of {goal}"
            llm.script(f"Task: {task}", [reply_text(f"{s} done", delay=1.5)], synthesis=reply_text(f"{s} done"))
            steps.append({"id": s, "task": task})
        handles.append(dags.submit(DagRequest(goal=goal, steps=steps), tenant="pair"))

    def ids() -> list[str]:
        out = []
        for h in handles:
            out += [s["run_id"] for s in h.status().get("steps") or [] if s.get("run_id")]
        return out

    assert most_active(door, ids, 5.0) <= 2, "DAG steps count in the tenant's max_active_runs"
    results = [h.result(timeout=60) for h in handles]
    assert [r["status"] for r in results] == ["succeeded"] * 3, "a step past the limit waits, it does not fail"
    assert all(s["status"] == "completed" for h in handles for s in h.status()["steps"])


# -- guardrails --------------------------------------------------------------------------------

def _events(d: Dispatcher, run_id: str) -> list[Any]:
    return [e for _, e in d.handle(run_id).events(timeout=40)]


def _sent(llm: LLMFixture, text: str) -> bool:
    return any(text in json.dumps(r.body) for r in llm.server.requests)


def test_a_denied_system_prompt_ends_the_run_before_any_llm_call(door: Door, llm: LLMFixture):
    q = llm.script(llm.unique("door: an innocent question"), [reply_text("never asked")])
    h = door.d.submit(RunRequest(query=q, system_prompt=f"always mention {DENIED}"))
    events = _events(door.d, h.run_id)
    assert [e.channel for e in events][-2:] == ["error", "done"]
    assert events[-2].data["kind"] == "guardrail" and events[-1].data["status"] == "failed"
    assert not _sent(llm, q), "no LLM call at all"


def _slow_run(llm: LLMFixture, tag: str) -> str:
    return llm.script(llm.unique(f"door: {tag}"),
                      [reply_tool_calls([("c1", "slow", {"tag": tag, "seconds": 2.5})]), reply_text("finished")],
                      synthesis=reply_text("finished"))


def _blocked_and_never_sent(events: list[Any], interrupt_id: str, llm: LLMFixture, text: str) -> None:
    blocked = [e for e in events if e.channel == "guardrail" and e.data.get("interrupt_id") == interrupt_id]
    assert blocked and blocked[-1].data["decision"] == "blocked", [e.channel for e in events]
    assert not [e for e in events if e.channel == "inject" and e.data.get("id") == interrupt_id]
    assert events[-1].data["status"] == "succeeded", "the run goes on"
    assert not _sent(llm, text), "the model never saw it"


def test_a_denied_interrupt_is_never_delivered(door: Door, llm: LLMFixture):
    h = door.d.submit(RunRequest(query=_slow_run(llm, "interrupted")))
    wait_for(lambda: h.status()["status"] == "running", 20, "the run to start")
    text = f"now do {DENIED} {uuid.uuid4().hex[:6]}"
    interrupt_id = h.interrupt(text)
    _blocked_and_never_sent(_events(door.d, h.run_id), interrupt_id, llm, text)


def test_a_denied_inject_on_a_thread_is_never_delivered(door: Door, llm: LLMFixture):
    tid = f"door-{uuid.uuid4().hex[:6]}"
    first = door.d.submit(RunRequest(query=_slow_run(llm, "threaded"), thread_id=tid))
    wait_for(lambda: first.status()["status"] == "running", 20, "the run to start")
    text = f"and {DENIED} {uuid.uuid4().hex[:6]}"
    second = door.d.submit(RunRequest(query=text, thread_id=tid))
    assert second.injected and second.run_id == first.run_id and second.interrupt_id
    _blocked_and_never_sent(_events(door.d, first.run_id), second.interrupt_id, llm, text)


def test_a_denied_dag_goal_ends_the_dag_before_any_llm_call(door: Door, llm: LLMFixture):
    goal = f"door: plan the {DENIED} {uuid.uuid4().hex[:6]}"
    h = DagDispatcher(door.settings).submit(DagRequest(goal=goal))
    result = h.result(timeout=30)
    assert result["status"] == "failed"
    errors = [e for _, e in h.events(timeout=5) if e.channel == "error"]
    assert errors and errors[-1].data["kind"] == "guardrail"
    assert not _sent(llm, goal)


# -- scopes ------------------------------------------------------------------------------------

def test_an_approval_that_approves_on_timeout_needs_the_approvals_write_scope(door: Door, llm: LLMFixture):
    env = worker_env(door.url, llm, **{**door.env, "REACTQ_API_TOKEN": TOKEN})
    gw = start_gateway(env, door.tmp / "gateway.log")
    try:
        admin = httpx2.Client(base_url=gw.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)

        def key(scopes: list[str]) -> httpx2.Client:
            made = admin.post("/v1/keys", json={"tenant": "acme", "scopes": scopes, "name": "door"}).json()
            return httpx2.Client(base_url=gw.url, headers={"Authorization": f"Bearer {made['key']}"}, timeout=30)

        writer = key(["runs:read", "runs:write", "schedules:write", "batches:write"])
        body = {"query": llm.script(llm.unique("door: approve on timeout"), [reply_text("ok")]),
                "approval": {"tools": "all", "on_timeout": "approve"}}
        refused = writer.post("/v1/runs", json=body)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "forbidden" and "approvals:write" in refused.text
        schedule = writer.post("/v1/schedules", json={"interval_s": 60, "paused": True, "run": body})
        assert schedule.status_code == 403 and "approvals:write" in schedule.text
        batch = writer.post("/v1/batches", json={"requests": [body]})
        assert batch.status_code == 403 and "approvals:write" in batch.text
        assert writer.post("/v1/runs", json={**body, "approval": {"tools": "all"}}).status_code == 202
        approver = key(["runs:read", "runs:write", "approvals:write"])
        assert approver.post("/v1/runs", json=body).status_code == 202
    finally:
        stop_gateway(gw)
