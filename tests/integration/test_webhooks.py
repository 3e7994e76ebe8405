"""Webhooks end to end: real workers deliver signed messages to a real receiver on loopback
(allowed with REACTQ_WEBHOOK_ALLOW), retry 5xx / 429 / slow answers, stop at other 4xx, and
deliver through a kill -9 of every worker; the delivery log over HTTP."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from reactq.dispatcher.client import Dispatcher
from reactq.dispatcher.dag import DagDispatcher
from reactq.dispatcher.http import create_app
from reactq.shared.keys import Keys
from reactq.shared.requests import DagRequest, PlanStepIn, RunRequest
from reactq.shared.settings import Settings
from reactq.shared.stores.webhooks import WebhookStore
from tests.integration.conftest import Backend, LLMFixture, Worker, WorkerFactory
from tests.integration.test_dag import registry_file, script_dag, script_step
from tests.scripted_server import reply_text, reply_tool_calls
from tests.webhook_receiver import SECRET, Plan, Receiver, signature_ok

pytestmark = pytest.mark.integration

QUEUES = "reactq.runs,reactq.tools,reactq.webhooks"
BACKOFF = 0.3
HOOK_ENV = {"REACTQ_WEBHOOK_SECRET": SECRET, "REACTQ_WEBHOOK_ALLOW": "127.0.0.1",
            "REACTQ_WEBHOOK_BACKOFF_S": str(BACKOFF), "REACTQ_WEBHOOK_MAX_ATTEMPTS": "4"}


class Hooked:
    def __init__(self, settings: Settings, r: redis.Redis, factory: WorkerFactory,
                 workers: list[Worker], receiver: Receiver, models: Path) -> None:
        self.settings = settings
        self.d = Dispatcher(settings)
        self.dags = DagDispatcher(settings)
        self.r = r
        self.factory = factory
        self.workers = workers
        self.receiver = receiver
        self.models = models
        self.log = WebhookStore(r, Keys())

    def start_worker(self, name: str, **env: str) -> Worker:
        w = self.factory.start(name, queues=QUEUES, concurrency=3, REACTQ_MODELS=str(self.models),
                               **{**HOOK_ENV, **env})
        self.workers.append(w)
        return w

    def deliveries(self, kind: str, owner: str, *, until: str | None = None,
                   timeout: float = 30.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            got = self.log.list_for(kind, owner)
            if until is None or (got and got[0]["status"] == until):
                return got
            assert time.monotonic() < deadline, f"{kind} {owner}: {got}"
            time.sleep(0.05)


def _hooked(backend: Backend, llm: LLMFixture, tmp: Path, db: int, names: list[str]) -> Iterator[Hooked]:
    url, env = backend.isolated(db)
    r = backend.client(url)
    if backend.kind != "cluster":
        r.flushdb()
    receiver = Receiver().start()
    models = registry_file(tmp / "models.toml", llm.server.base_url)
    factory = WorkerFactory(url, llm, tmp, env)
    settings = Settings(redis_url=url, models=models, tools="tests.integration.tools:TOOLS", demo_tools=True,
                        openai_api_key="k", webhook_secret=SECRET, webhook_allow="127.0.0.1",
                        **backend.settings(env))
    c = Hooked(settings, r, factory, [], receiver, models)
    for name in names:
        c.workers.append(factory.start(name, queues=QUEUES, concurrency=3, wait=False,
                                       REACTQ_MODELS=str(models), **HOOK_ENV))
    for w in c.workers:
        factory.wait_ready(w)
    yield c
    factory.stop_all()
    receiver.stop()


@pytest.fixture(scope="module")
def hooked(backend: Backend, llm: LLMFixture, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hooked]:
    yield from _hooked(backend, llm, tmp_path_factory.mktemp("hooks"), 14, ["hook-a", "hook-b"])


def _run(c: Hooked, llm: LLMFixture, url: str, answer: str = "the answer") -> str:
    q = llm.script(llm.unique("webhook run"), [reply_text("done thinking")], synthesis=reply_text(answer))
    return c.d.submit(RunRequest(query=q, webhook={"url": url})).run_id


def test_a_run_webhook_is_retried_through_500s_and_delivered_signed(hooked: Hooked, llm: LLMFixture) -> None:
    path = f"/run-{uuid.uuid4().hex[:6]}"
    url = hooked.receiver.plan(path, [Plan(500), Plan(503), Plan(200)])
    run_id = _run(hooked, llm, url, "forty-two")
    got = hooked.receiver.wait(path, 3)
    assert {g.headers["webhook-id"] for g in got} == {f"msg_run_{run_id}"}, "the same id on every attempt"
    assert all(signature_ok(g) for g in got) and all(g.headers["webhook-timestamp"].isdigit() for g in got)
    assert {g.body for g in got} == {got[0].body}, "every attempt sends the same bytes"
    msg = got[0].json
    assert msg["type"] == "run.done" and msg["timestamp"].endswith("Z")
    data = msg["data"]
    assert (data["run_id"], data["status"], data["answer"]) == (run_id, "succeeded", "forty-two")
    assert "output" in data and data["usage"]["total_tokens"] >= 0
    # Retry n waits backoff x 2^(n-1), never less (jitter only lengthens).
    assert got[1].at - got[0].at >= BACKOFF * 0.95 and got[2].at - got[1].at >= 2 * BACKOFF * 0.95
    [d] = hooked.deliveries("run", run_id, until="delivered")
    assert (d["webhook_id"], d["type"], d["attempts"], d["last_status_code"], d["next_attempt_at"]) == \
        (f"msg_run_{run_id}", "run.done", 3, 200, None)
    with TestClient(create_app(hooked.settings)) as http:
        listed = http.get(f"/v1/runs/{run_id}/webhooks")
        assert listed.status_code == 200 and listed.json()["deliveries"][0]["status"] == "delivered"
        assert http.get("/v1/runs/nope/webhooks").status_code == 404
        text = http.get("/metrics").text
        assert 'reactq_webhook_attempts_total{outcome="retry",type="run.done"}' in text
        assert 'reactq_webhook_deliveries_total{status="delivered",type="run.done"}' in text


def test_a_400_is_final(hooked: Hooked, llm: LLMFixture) -> None:
    path = f"/gone-{uuid.uuid4().hex[:6]}"
    run_id = _run(hooked, llm, hooked.receiver.plan(path, [Plan(400)]))
    hooked.receiver.wait(path, 1)
    [d] = hooked.deliveries("run", run_id, until="failed")
    assert (d["attempts"], d["last_status_code"]) == (1, 400)
    time.sleep(4 * BACKOFF + 1)
    assert len(hooked.receiver.at(path)) == 1, "not tried again"


def test_a_429_waits_for_its_retry_after(hooked: Hooked, llm: LLMFixture) -> None:
    path = f"/busy-{uuid.uuid4().hex[:6]}"
    url = hooked.receiver.plan(path, [Plan(429, {"Retry-After": "2"}), Plan(200)])
    run_id = _run(hooked, llm, url)
    first, second = hooked.receiver.wait(path, 2)
    assert second.at - first.at >= 2.0, "Retry-After: 2 beats a 0.3 s backoff"
    assert hooked.deliveries("run", run_id, until="delivered")[0]["attempts"] == 2


def test_retries_stop_at_max_attempts(hooked: Hooked, llm: LLMFixture) -> None:
    path = f"/down-{uuid.uuid4().hex[:6]}"
    run_id = _run(hooked, llm, hooked.receiver.plan(path, [Plan(502)]))
    [d] = hooked.deliveries("run", run_id, until="failed", timeout=40)
    assert (d["attempts"], d["last_status_code"]) == (4, 502)
    assert len(hooked.receiver.at(path)) == 4


def test_a_run_without_a_webhook_has_no_deliveries(hooked: Hooked, llm: LLMFixture) -> None:
    q = llm.script(llm.unique("no webhook"), [reply_text("x")], synthesis=reply_text("y"))
    h = hooked.d.submit(RunRequest(query=q))
    assert h.result(timeout=30)["status"] == "succeeded"
    assert hooked.log.list_for("run", h.run_id) == []
    assert hooked.r.zscore(Keys().due, f"webhook:msg_run_{h.run_id}") is None


def test_a_dag_webhook_says_dag_done(hooked: Hooked, llm: LLMFixture) -> None:
    uid = uuid.uuid4().hex[:8]
    goal, task = f"Hooked goal {uid}", f"Hooked task {uid}"
    script_dag(llm, goal, analysis={"achieved": True, "confidence": 0.9, "reasoning": "ok"},
               synthesis=f"dag answer {uid}")
    script_step(llm, task, [reply_text("step done")], f"step result {uid}")
    path = f"/dag-{uid}"
    h = hooked.dags.submit(DagRequest(goal=goal, steps=[PlanStepIn(id="A", task=task)],
                                      webhook={"url": hooked.receiver.plan(path, [Plan(200)])}))
    [got] = hooked.receiver.wait(path, 1, timeout=40)
    assert signature_ok(got) and got.headers["webhook-id"] == f"msg_dag_{h.dag_id}"
    msg = got.json
    assert msg["type"] == "dag.done" and msg["data"]["dag_id"] == h.dag_id
    assert (msg["data"]["status"], msg["data"]["answer"]) == ("succeeded", f"dag answer {uid}")
    with TestClient(create_app(hooked.settings)) as http:
        [d] = http.get(f"/v1/dags/{h.dag_id}/webhooks").json()["deliveries"]
        assert (d["type"], d["status"], d["attempts"]) == ("dag.done", "delivered", 1)


def test_an_http_batch_webhook_says_batch_done(hooked: Hooked, llm: LLMFixture) -> None:
    path = f"/batch-{uuid.uuid4().hex[:6]}"
    url = hooked.receiver.plan(path, [Plan(200)])
    queries = [llm.script(llm.unique(f"batch line {i}"), [reply_text("ok")], synthesis=reply_text(f"a{i}"))
               for i in range(2)]
    with TestClient(create_app(hooked.settings)) as http:
        bad = http.post("/v1/batches", json={"requests": [{"query": "x"}], "webhook": {"url": "http://10.0.0.1/"}})
        assert bad.status_code == 422 and "webhook.url" in bad.text
        res = http.post("/v1/batches", json={"requests": [{"query": q} for q in queries],
                                             "webhook": {"url": url}})
        assert res.status_code == 202, res.text
        batch_id = res.json()["batch_id"]
        [got] = hooked.receiver.wait(path, 1, timeout=40)
        msg = got.json
        assert signature_ok(got) and msg["type"] == "batch.done"
        assert (msg["data"]["batch_id"], msg["data"]["status"], msg["data"]["succeeded"]) == (batch_id, "done", 2)
        deadline = time.monotonic() + 10
        while (ds := http.get(f"/v1/batches/{batch_id}/webhooks").json()["deliveries"])[0]["status"] != "delivered":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert ds[0]["webhook_id"] == f"msg_batch_{batch_id}"


# -- kill -9 of every worker while the receiver is slow -----------------------------------------

@pytest.fixture
def killable(backend: Backend, llm: LLMFixture, tmp_path: Path) -> Iterator[Hooked]:
    yield from _hooked(backend, llm, tmp_path, 15, ["kill-a", "kill-b"])


def test_a_delivery_survives_a_kill_of_every_worker(killable: Hooked, llm: LLMFixture) -> None:
    c = killable
    path = f"/slow-{uuid.uuid4().hex[:6]}"
    url = c.receiver.plan(path, [Plan(200, delay=6.0), Plan(200)])
    run_id = _run(c, llm, url)
    [first] = c.receiver.wait(path, 1)
    for w in list(c.workers):
        w.kill()  # mid-attempt: the receiver holds the request, nobody will record its answer
    c.start_worker("kill-c")
    ready_at = time.time()  # the new worker's watchdog notices the dead holder's lapsed lease
    got = c.receiver.wait(path, 2, timeout=30)
    assert got[1].at - ready_at < 8, "resumed within seconds, not after the visibility timeout"
    assert {g.headers["webhook-id"] for g in got} == {first.headers["webhook-id"]} == {f"msg_run_{run_id}"}
    assert all(signature_ok(g) for g in got)
    [d] = c.deliveries("run", run_id, until="delivered")
    assert d["attempts"] >= 1 and d["last_status_code"] == 200


@pytest.fixture
def bare(backend: Backend, llm: LLMFixture, tmp_path: Path) -> Iterator[Hooked]:
    yield from _hooked(backend, llm, tmp_path, 15, [])


def test_a_worker_killed_between_the_last_commit_and_the_send_loses_no_message(
        bare: Hooked, llm: LLMFixture, tmp_path: Path) -> None:
    # Given the only worker, stopped right after a run's terminal commit (how many commits a
    # run makes is read from a reference run on a plain worker)
    plain = bare.start_worker("commit-ref")
    q = llm.script(llm.unique("reference run"), [reply_text("done thinking")], synthesis=reply_text("x"))
    ref = bare.d.submit(RunRequest(query=q))
    assert ref.result(timeout=30)["status"] == "succeeded"
    commits = int(bare.r.hget(Keys().run(ref.run_id), "step_no") or 0)
    plain.stop()
    fault = tmp_path / "fault"
    a = bare.start_worker("commit-a", REACTQ_FAULT_POINTS="after_commit", REACTQ_FAULT_SKIP=str(commits - 1),
                          REACTQ_FAULT_FILE=str(fault))
    path = f"/late-{uuid.uuid4().hex[:6]}"
    run_id = _run(bare, llm, bare.receiver.plan(path, [Plan(200)]))
    deadline = time.monotonic() + 30
    while not fault.exists():
        assert time.monotonic() < deadline, a.log.read_text()[-2000:]
        time.sleep(0.05)
    # When it is killed before it sent the delivery, and another worker starts
    a.kill()
    assert bare.d.handle(run_id).status()["status"] == "succeeded" and not bare.receiver.at(path)
    bare.start_worker("commit-b")
    # Then the message armed with the commit is delivered by the new worker's watchdog
    [got] = bare.receiver.wait(path, 1, timeout=20)
    assert got.headers["webhook-id"] == f"msg_run_{run_id}" and signature_ok(got)


# -- the docs' receiver, run as written --------------------------------------------------------

def test_the_docs_receiver_verifies_real_messages_and_refuses_forged_ones(
        hooked: Hooked, llm: LLMFixture, tmp_path: Path) -> None:
    import re
    import subprocess
    import sys

    import httpx2

    from reactq.shared.redisconn import free_port

    text = (Path(__file__).resolve().parents[2] / "docs/webhooks.md").read_text()
    code = re.search(r'^```python title="receiver.py"\n(.*?)^```', text, re.M | re.S)
    assert code is not None and len([ln for ln in code.group(1).splitlines() if ln.strip()]) <= 16
    (tmp_path / "receiver.py").write_text(code.group(1))
    port = free_port()
    env = {"PATH": "/usr/bin:/bin", "PORT": str(port), "REACTQ_WEBHOOK_SECRET": SECRET}
    proc = subprocess.Popen([sys.executable, "receiver.py"], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                forged = httpx2.post(f"http://127.0.0.1:{port}/", content=b'{"type":"run.done"}', headers={
                    "webhook-id": "msg_forged", "webhook-timestamp": str(int(time.time())),
                    "webhook-signature": "v1,AAAA"})
                break
            except httpx2.ConnectError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert forged.status_code == 400
        run_id = _run(hooked, llm, f"http://127.0.0.1:{port}/reactq")
        assert hooked.deliveries("run", run_id, until="delivered")[0]["last_status_code"] == 204
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert out.splitlines() == [f"msg_run_{run_id} run.done succeeded"]


def test_enqueue_webhook_sends_approval_requested_only_when_asked(hooked: Hooked) -> None:
    from reactq.workers.runtime import Runtime
    from reactq.workers.webhooks import enqueue_webhook

    rt = Runtime(hooked.settings)
    path = f"/approval-{uuid.uuid4().hex[:6]}"
    url = hooked.receiver.plan(path, [Plan(200)])
    data = {"approval_id": "ap1", "run_id": "r-approval", "tool_name": "deploy", "tool_args": {}}

    def send(task: str, args: list[Any], queue: str) -> None:
        hooked.d.send(task, args, queue)

    assert enqueue_webhook(rt, "approval.requested", data, webhook={"url": url}, owner=("run", "r-approval"),
                           key="ap1", send=send) is None, "events defaults to done only"
    wid = enqueue_webhook(rt, "approval.requested", data, webhook={"url": url, "events": ["done", "approval.requested"]},
                          owner=("run", "r-approval"), key="ap1", send=send)
    assert wid == "msg_approval_ap1"
    [got] = hooked.receiver.wait(path, 1)
    assert signature_ok(got) and got.json["type"] == "approval.requested" and got.json["data"] == data
    [d] = hooked.deliveries("run", "r-approval", until="delivered")
    assert (d["webhook_id"], d["type"]) == ("msg_approval_ap1", "approval.requested")


def test_a_call_waiting_for_a_person_sends_approval_requested_then_the_run_sends_run_done(
        hooked: Hooked, llm: LLMFixture) -> None:
    path = f"/ask-{uuid.uuid4().hex[:6]}"
    url = hooked.receiver.plan(path, [Plan(200)])
    q = llm.script(llm.unique("webhook approval"), [reply_tool_calls([("t1", "transfer", {"tag": "hook", "amount": 5})]),
                                                     reply_text("all done")], synthesis=reply_text("synthesized"))
    h = hooked.d.submit(RunRequest(query=q, completion_check=False,
                                   webhook={"url": url, "events": ["done", "approval.requested"]}))
    [asked] = hooked.receiver.wait(path, 1)
    msg = asked.json
    assert signature_ok(asked) and msg["type"] == "approval.requested"
    assert (msg["data"]["run_id"], msg["data"]["tool_name"], msg["data"]["status"]) == (h.run_id, "transfer", "pending")
    assert asked.headers["webhook-id"] == f"msg_approval_{msg['data']['approval_id']}"
    h.cancel()
    done = hooked.receiver.wait(path, 2)[1]
    assert done.json["type"] == "run.done" and done.json["data"]["status"] == "cancelled"
    types = {d["type"] for d in hooked.deliveries("run", h.run_id)}
    assert types == {"approval.requested", "run.done"}


def test_deliveries_are_their_owners_tenants_and_only_that_tenant_reads_them(
        hooked: Hooked, llm: LLMFixture) -> None:
    """A run's, a DAG's and a batch's deliveries carry the owner's tenant; the delivery
    logs answer that tenant (and admins), and any other tenant's key a 404, as for an id
    that never existed."""
    token = "hooks-admin-token"
    settings = hooked.settings.model_copy(update={"api_token": token})
    uid = uuid.uuid4().hex[:8]
    path = f"/tenant-{uid}"
    url = hooked.receiver.plan(path, [Plan(200)])
    goal, task = f"Tenant goal {uid}", f"Tenant task {uid}"
    script_dag(llm, goal, analysis={"achieved": True, "confidence": 0.9, "reasoning": "ok"},
               synthesis=f"dag answer {uid}")
    script_step(llm, task, [reply_text("step done")], f"step result {uid}")
    q = llm.script(llm.unique("tenant webhook run"), [reply_text("x")], synthesis=reply_text("y"))
    with TestClient(create_app(settings)) as http:
        admin = {"Authorization": f"Bearer {token}"}

        def key(tenant: str) -> dict[str, str]:
            made = http.post("/v1/keys", headers=admin, json={"tenant": tenant, "name": tenant,
                                                             "scopes": ["runs:read", "runs:write", "dags:write",
                                                                        "batches:write"]})
            assert made.status_code == 201, made.text
            return {"Authorization": f"Bearer {made.json()['key']}"}

        acme, beta = key("acme"), key("beta")
        run_id = http.post("/v1/runs", headers=acme, json={"query": q, "webhook": {"url": url}}).json()["run_id"]
        dag_id = http.post("/v1/dags", headers=acme, json={"goal": goal, "steps": [{"id": "A", "task": task}],
                                                           "webhook": {"url": url}}).json()["dag_id"]
        batch_id = http.post("/v1/batches", headers=acme, json={"requests": [{"query": q}],
                                                                "webhook": {"url": url}}).json()["batch_id"]
        got = hooked.receiver.wait(path, 3, timeout=60)
        assert sorted(g.json["type"] for g in got) == ["batch.done", "dag.done", "run.done"]
        assert {g.json["data"]["tenant"] for g in got} == {"acme"}
        for kind, owner, plural in (("run", run_id, "runs"), ("dag", dag_id, "dags"), ("batch", batch_id, "batches")):
            [stored] = hooked.deliveries(kind, owner)
            assert hooked.r.hget(Keys().webhook(stored["webhook_id"]), "tenant") == b"acme"
            route = f"/v1/{plural}/{owner}/webhooks"
            res = http.get(route, headers=acme)
            assert res.status_code == 200, res.text
            [d] = res.json()["deliveries"]
            assert d["tenant"] == "acme" and d["webhook_id"] == stored["webhook_id"]
            assert http.get(route, headers=beta).status_code == 404
            assert http.get(route, headers=admin).json()["deliveries"][0]["tenant"] == "acme"
        # A delivery filed under an owner of another tenant is never shown to this one.
        stray = hooked.log.load(f"msg_run_{run_id}")
        assert stray is not None
        stray.webhook_id, stray.tenant = f"msg_stray_{uid}", "beta"
        hooked.log.create(stray)
        assert [d["webhook_id"] for d in http.get(f"/v1/runs/{run_id}/webhooks", headers=acme).json()["deliveries"]] \
            == [f"msg_run_{run_id}"]
