"""The HTTP API's contract, route by route, against a real gateway and workers:

* every answer of every route validates against the model it declares (``reactq.shared.api``)
  and its status is one ``/openapi.json`` declares for the operation;
* an error corpus — every operation × bad ids, bad bodies, no token — answers the one error
  shape ``{"error": {code, message, field?, details?}}`` with the code of its status, and
  ``Retry-After`` on 429 and 503.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from pydantic import TypeAdapter

from reactq.shared.api import (
    BatchCancelling,
    BatchCreated,
    BatchPage,
    BatchStatus,
    DagCancelling,
    DagCreated,
    DagPage,
    DagStatus,
    Dashboard,
    ErrorResponse,
    Health,
    InterruptAccepted,
    ModelCatalog,
    Readiness,
    RunCancelling,
    RunCreated,
    RunPage,
    RunRow,
    RunStatus,
    ThreadInjected,
    ThreadView,
    ToolCatalog,
    UiConfig,
    parse_event,
)
from reactq.shared.api.approvals import ApprovalPage, Decided, RunApprovals
from reactq.shared.api.errors import ERROR_CODES
from reactq.shared.api.keys import KeyCreated, KeyList, KeyRevoked
from reactq.shared.api.responses import OpenAIErrorResponse, ResponseObject
from reactq.shared.api.schedules import ScheduleList, ScheduleView, Triggered
from reactq.shared.api.evals import EvalCasePage, EvalCompare, EvalCreated, EvalPage, EvalView
from reactq.shared.api.ops import FlowModels
from reactq.shared.api.webhooks import Deliveries
from reactq.shared.fork.models import BatchForked, DagForked, ForkCreated
from tests.integration.conftest import worker_env
from tests.integration.test_gateway import Gateway, read_sse, start_gateway, stop_gateway
from tests.scripted_server import reply_text, reply_tool_calls
from tests.metrics_kit import settled

pytestmark = pytest.mark.integration
TOKEN = "contract-token"


@pytest.fixture(scope="module")
def gateway(redis_url: str, llm: Any, workers: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    env = worker_env(redis_url, llm, REACTQ_API_TOKEN=TOKEN, REACTQ_SSE_KEEPALIVE="0.5")
    gw = start_gateway(env, tmp_path_factory.mktemp("contract") / "gateway.log", via_cli=False)
    yield gw
    stop_gateway(gw)


@pytest.fixture(scope="module")
def api(gateway: Gateway) -> Iterator[httpx2.Client]:
    with httpx2.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def spec(api: httpx2.Client) -> dict[str, Any]:
    return dict(api.get("/openapi.json").json())


def declared(spec: dict[str, Any], method: str, template: str) -> set[int]:
    return {int(s) for s in spec["paths"][template][method.lower()]["responses"]}


class Checker:
    """Calls a route, checks the status is declared and the body validates against ``model``."""

    def __init__(self, api: httpx2.Client, spec: dict[str, Any]) -> None:
        self.api = api
        self.spec = spec
        self.seen: set[tuple[str, str]] = set()

    def __call__(self, method: str, template: str, model: Any, status: int, path: str | None = None,
                 **kwargs: Any) -> Any:
        return self.either(method, template, {status: model}, path, **kwargs)

    def either(self, method: str, template: str, models: dict[int, Any], path: str | None = None,
               **kwargs: Any) -> Any:
        """One request whose status is one of ``models``' keys; its body validated by that model."""
        res = self.api.request(method, path or template, **kwargs)
        assert res.status_code in models, (method, path or template, res.text[:500])
        status, model = res.status_code, models[res.status_code]
        assert status in declared(self.spec, method, template), (method, template, status)
        self.seen.add((method.lower(), template))
        if model is None:
            return res
        adapter = model if isinstance(model, TypeAdapter) else TypeAdapter(model)
        return adapter.validate_python(res.json())


def _wait(api: httpx2.Client, url: str, done: tuple[str, ...], timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = dict(api.get(url).json())
        if body["status"] in done:
            return body
        time.sleep(0.1)
    raise AssertionError(f"{url} still {body['status']}")


def test_every_route_answers_its_declared_model(api: httpx2.Client, spec: dict[str, Any], llm: Any) -> None:
    check = Checker(api, spec)
    q = llm.script(llm.unique("contract run"), [reply_tool_calls([("c1", "add", {"a": 2, "b": 3})]),
                                                 reply_text("5")], synthesis=reply_text("five"))
    created: RunCreated = check("POST", "/v1/runs", RunCreated, 202, json={"query": q, "tools": ["add"],
                                                                             "thread_id": "contract-thread"})
    rid = created.run_id
    with api.stream("GET", created.events_url) as res:
        assert res.headers["content-type"].startswith("text/event-stream")
        frames, _ = read_sse(res)
    events = [parse_event(f["id"], f["event"], f["data"]) for f in frames]
    assert events[-1].event == "done" and events[-1].data.status == "succeeded"
    check("GET", "/v1/runs/{run_id}/events", None, 200, f"/v1/runs/{rid}/events",
          params={"after": frames[-1]["id"]})
    status: RunStatus = check("GET", "/v1/runs/{run_id}", RunStatus, 200, f"/v1/runs/{rid}")
    assert status.status == "succeeded" and status.result is not None
    check("GET", "/v1/runs", RunPage, 200, params={"thread_id": "contract-thread", "limit": 5})
    check("GET", "/v1/runs/{run_id}/summary", RunRow, 200, f"/v1/runs/{rid}/summary")
    check("GET", "/v1/threads/{thread_id}", ThreadView, 200, "/v1/threads/contract-thread")
    check("POST", "/v1/runs/{run_id}/cancel", ErrorResponse, 409, f"/v1/runs/{rid}/cancel")
    check("POST", "/v1/runs/{run_id}/interrupts", ErrorResponse, 409, f"/v1/runs/{rid}/interrupts",
          json={"content": "late"})

    # A run that is still going: interrupt, then the thread's inject reply, then cancel.
    slow = llm.script(llm.unique("contract slow"), [reply_tool_calls([("s1", "sleep", {"seconds": 5})]),
                                                    reply_text("slept")], synthesis=reply_text("ok"))
    live: RunCreated = check("POST", "/v1/runs", RunCreated, 202, json={"query": slow, "thread_id": "contract-live"})
    check("POST", "/v1/runs/{run_id}/interrupts", InterruptAccepted, 202, f"/v1/runs/{live.run_id}/interrupts",
          json={"content": "and hurry"})
    injected = check("POST", "/v1/runs", ThreadInjected, 202, json={"query": "more", "thread_id": "contract-live"})
    assert injected.run_id == live.run_id and injected.interrupt_id
    check("POST", "/v1/runs/{run_id}/cancel", RunCancelling, 202, f"/v1/runs/{live.run_id}/cancel")

    dag: DagCreated = check("POST", "/v1/dags", DagCreated, 202,
                            json={"goal": "contract goal", "steps": [{"id": "a", "task": "t"}]})
    check("GET", "/v1/dags/{dag_id}", DagStatus, 200, f"/v1/dags/{dag.dag_id}")
    page: DagPage = check("GET", "/v1/dags", DagPage, 200, params={"limit": 50})
    assert dag.dag_id in [d.dag_id for d in page.dags]
    check("POST", "/v1/dags/{dag_id}/cancel", DagCancelling, 202, f"/v1/dags/{dag.dag_id}/cancel")
    _wait(api, f"/v1/dags/{dag.dag_id}", ("succeeded", "failed", "cancelled"))
    check("POST", "/v1/dags/{dag_id}/cancel", ErrorResponse, 409, f"/v1/dags/{dag.dag_id}/cancel")
    check("POST", "/v1/dags/{dag_id}/interrupts", ErrorResponse, 409, f"/v1/dags/{dag.dag_id}/interrupts",
          json={"content": "late"})
    check("GET", "/v1/dags/{dag_id}/events", None, 200, f"/v1/dags/{dag.dag_id}/events")
    # Forks: a dry run of the ended run, the cancelled DAG's step run again, a batch's dry run.
    check("POST", "/v1/runs/{run_id}/fork", ForkCreated, 200, f"/v1/runs/{rid}/fork",
          json={"from": "last_turn", "dry_run": True})
    # (Its step may have been stopped before its first turn, which leaves nothing to fork: 409.
    # One request, checked as whichever it was: a probe first could see 409 and the check 202.)
    check.either("POST", "/v1/dags/{dag_id}/fork", {202: DagForked, 409: ErrorResponse},
                 f"/v1/dags/{dag.dag_id}/fork", json={})

    bq = llm.script(llm.unique("contract batch"), [reply_text("b")], synthesis=reply_text("b"))
    batch: BatchCreated = check("POST", "/v1/batches", BatchCreated, 202,
                                json={"requests": [{"query": bq}, {"query": ""}]})
    assert [x.line for x in batch.invalid] == [2]
    check("GET", "/v1/batches/{batch_id}", BatchStatus, 200, f"/v1/batches/{batch.batch_id}",
          params={"results": "true"})
    batches: BatchPage = check("GET", "/v1/batches", BatchPage, 200, params={"status": "running"})
    assert all(b.status == "running" for b in batches.batches)
    _wait(api, f"/v1/batches/{batch.batch_id}", ("done", "cancelled"))
    check("POST", "/v1/batches/{batch_id}/cancel", ErrorResponse, 409, f"/v1/batches/{batch.batch_id}/cancel")
    listed: BatchPage = check("GET", "/v1/batches", BatchPage, 200, params={"status": "done", "limit": 500})
    check("POST", "/v1/batches/{batch_id}/fork", BatchForked, 200, f"/v1/batches/{batch.batch_id}/fork",
          json={"dry_run": True})
    assert batch.batch_id in [b.batch_id for b in listed.batches]
    running = check("POST", "/v1/batches", BatchCreated, 202,
                    json={"requests": [{"query": slow}], "concurrency": 1})
    check("POST", "/v1/batches/{batch_id}/cancel", BatchCancelling, 202, f"/v1/batches/{running.batch_id}/cancel")
    check("GET", "/v1/runs/{run_id}/webhooks", Deliveries, 200, f"/v1/runs/{rid}/webhooks")
    check("GET", "/v1/dags/{dag_id}/webhooks", Deliveries, 200, f"/v1/dags/{dag.dag_id}/webhooks")
    check("GET", "/v1/batches/{batch_id}/webhooks", Deliveries, 200, f"/v1/batches/{batch.batch_id}/webhooks")

    # A run whose call waits for a person: its approvals, the inbox, a decision, a second one.
    aq = llm.script(llm.unique("contract approval"), [reply_tool_calls([("a1", "add", {"a": 1, "b": 1})]),
                                                      reply_text("2")], synthesis=reply_text("two"))
    waiting: RunCreated = check("POST", "/v1/runs", RunCreated, 202,
                                json={"query": aq, "tools": ["add"], "approval": {"tools": ["add"]}})
    _wait(api, f"/v1/runs/{waiting.run_id}", ("waiting",))
    mine: RunApprovals = check("GET", "/v1/runs/{run_id}/approvals", RunApprovals, 200,
                               f"/v1/runs/{waiting.run_id}/approvals")
    inbox: ApprovalPage = check("GET", "/v1/approvals", ApprovalPage, 200, params={"limit": 500})
    first = mine.approvals[0]
    assert first.approval_id in [a.approval_id for a in inbox.approvals]
    decision = f"/v1/runs/{waiting.run_id}/approvals/{first.approval_id}"
    body = {"decision": "approve", "args_digest": first.args_digest}
    check("POST", "/v1/runs/{run_id}/approvals/{approval_id}", Decided, 200, decision, json=body)
    check("POST", "/v1/runs/{run_id}/approvals/{approval_id}", ErrorResponse, 409, decision, json=body)
    _wait(api, f"/v1/runs/{waiting.run_id}", ("succeeded",))
    made: ScheduleView = check("POST", "/v1/schedules", ScheduleView, 201,
                               json={"interval_s": 3600, "run": {"query": "contract schedule"}, "paused": True})
    sid = made.schedule_id
    check("POST", "/v1/schedules", ErrorResponse, 409,
          json={"schedule_id": sid, "interval_s": 60, "run": {"query": "again"}})
    check("GET", "/v1/schedules/{schedule_id}", ScheduleView, 200, f"/v1/schedules/{sid}",
          params={"from": "2027-03-27T00:00:00Z", "count": 3})
    schedules: ScheduleList = check("GET", "/v1/schedules", ScheduleList, 200, params={"limit": 500})
    assert sid in [s.schedule_id for s in schedules.schedules]
    check("PATCH", "/v1/schedules/{schedule_id}", ScheduleView, 200, f"/v1/schedules/{sid}",
          json={"paused": False, "interval_s": 7200})
    check("POST", "/v1/schedules/{schedule_id}/trigger", Triggered, 202, f"/v1/schedules/{sid}/trigger")
    check("DELETE", "/v1/schedules/{schedule_id}", None, 204, f"/v1/schedules/{sid}")

    eq = llm.script(llm.unique("contract eval"), [reply_text("e")], synthesis=reply_text("yes"))
    made_eval: EvalCreated = check("POST", "/v1/evals", EvalCreated, 202, json={
        "cases": [{"id": "a", "query": eq, "expected": "yes"}, {"id": "b", "query": ""}], "evaluators": ["exact"]})
    eid = made_eval.eval_id
    _wait(api, f"/v1/evals/{eid}", ("done",))
    assert check("GET", "/v1/evals/{eval_id}", EvalView, 200, f"/v1/evals/{eid}").pass_rate == 1.0
    check("GET", "/v1/evals/{eval_id}/cases", EvalCasePage, 200, f"/v1/evals/{eid}/cases")
    assert eid in [e.eval_id for e in check("GET", "/v1/evals", EvalPage, 200).evals]
    check("GET", "/v1/evals/{eval_id}/compare/{other_id}", EvalCompare, 200, f"/v1/evals/{eid}/compare/{eid}")

    key: KeyCreated = check("POST", "/v1/keys", KeyCreated, 201,
                            json={"tenant": "contract", "scopes": ["runs:read"], "name": "contract"})
    keys: KeyList = check("GET", "/v1/keys", KeyList, 200)
    assert key.key_id in [k.key_id for k in keys.keys] and key.key.startswith("rq_")
    check("DELETE", "/v1/keys/{key_id}", KeyRevoked, 200, f"/v1/keys/{key.key_id}")

    check("GET", "/healthz", Health, 200)
    check("GET", "/readyz", Readiness, 200)
    check("GET", "/metrics", None, 200)
    check("GET", "/v1/tools", ToolCatalog, 200)
    models: ModelCatalog = check("GET", "/v1/models", ModelCatalog, 200, params={"use": "true"})
    assert models.published and all(m.use is not None for m in models.models)
    check("GET", "/v1/flow/models", FlowModels, 200)
    check("GET", "/v1/ui/config", UiConfig, 200)
    dash: Dashboard = settled(lambda: check("GET", "/v1/ui/dashboard", Dashboard, 200),
                              lambda dash: dash.turn_seconds is not None and dash.turn_seconds.count >= 1)
    assert dash.runs >= 1 and dash.turn_seconds is not None and dash.turn_seconds.count >= 1

    rq = llm.script(llm.unique("contract response"), [reply_text("r")], synthesis=reply_text("r"))
    resp: ResponseObject = check("POST", "/v1/responses", ResponseObject, 200, json={"model": "scripted", "input": rq})
    assert resp.status == "completed" and resp.id.startswith("resp_")
    check("GET", "/v1/responses/{response_id}", ResponseObject, 200, f"/v1/responses/{resp.id}")
    check("POST", "/v1/responses/{response_id}/cancel", ResponseObject, 200, f"/v1/responses/{resp.id}/cancel")

    every = {(m, p) for p, ops in spec["paths"].items() for m in ops}
    assert every - check.seen == set(), "routes the contract test did not call"


# ----------------------------------------------------------------------------- the error corpus

BAD_IDS = ("ID:x", "a b", "x" * 129, ".hidden")
#: A thread id is the caller's name: ':' and a leading '.' are fine there.
BAD_THREAD_IDS = ("a b", "x" * 201, "a{b}")


def _path(template: str, value: str) -> str:
    return re.sub(r"\{[a-z_]+\}", lambda _: value, template)


def openai_shaped(template: str) -> bool:
    """``/v1/responses`` answers errors as OpenAI does (the ``openai`` client parses them)."""
    return template.startswith("/v1/responses")


def refused(template: str) -> int:
    """The status of a refused request (a bad id, a bad field) on ``template``."""
    return 400 if openai_shaped(template) else 422


def field_of(res: httpx2.Response, template: str) -> str:
    return str(res.json()["error"]["param" if openai_shaped(template) else "field"])


def assert_error_shape(res: httpx2.Response, spec: dict[str, Any], method: str, template: str) -> None:
    assert res.status_code >= 400, (method, template, res.status_code)
    assert res.headers["content-type"].startswith("application/json"), res.headers
    if openai_shaped(template):
        err = OpenAIErrorResponse.model_validate(res.json()).error
        assert err.message and err.type, res.text[:300]
        assert res.status_code in declared(spec, method, template), (method, template, res.status_code)
        return
    body = ErrorResponse.model_validate(res.json())
    assert body.error.code == ERROR_CODES[res.status_code], (method, template, res.text[:300])
    assert res.status_code in declared(spec, method, template), (method, template, res.status_code, res.text[:300])
    assert len(res.content) < 4000, "an error echoes too much of the input"
    if res.status_code in (429, 503):
        assert res.headers.get("retry-after"), res.headers


def test_the_error_corpus_answers_one_shape(api: httpx2.Client, gateway: Gateway, spec: dict[str, Any]) -> None:
    anon = httpx2.Client(base_url=gateway.url, timeout=10)
    long_text = "y" * 50_000
    calls = 0
    for template, ops in spec["paths"].items():
        for method in ops:
            if template not in ("/healthz", "/readyz"):  # probes need no token
                res = anon.request(method, _path(template, "x"), json={})
                assert res.status_code == 401
                assert_error_shape(res, spec, method, template)
                calls += 1
            if "{" in template:
                for bad in BAD_THREAD_IDS if "{thread_id}" in template else BAD_IDS:
                    res = api.request(method, _path(template, bad), json={"content": "x"})
                    assert res.status_code == refused(template), (method, template, bad, res.text[:200])
                    assert_error_shape(res, spec, method, template)
                    assert field_of(res, template).endswith("_id")
                    calls += 1
                # A body every route of the id accepts (an interrupt's, or a change of nothing).
                body = {} if method == "patch" else {"content": "x"}
                unknown = "key_0000000000000000" if "{key_id}" in template else "nope"  # ids of their own shape
                res = api.request(method, _path(template, unknown), json=body)
                assert res.status_code == 404, (method, template, res.text[:200])
                assert_error_shape(res, spec, method, template)
                calls += 1
            if method == "post":
                path = _path(template, "nope")
                for content, ctype in ((b"{not json", "application/json"), (b'{"a": NaN}', "application/json"),
                                       (b"<xml/>", "application/xml"),
                                       (json.dumps({"query": long_text, "surprise": long_text}).encode(),
                                        "application/json")):
                    res = api.post(path, content=content, headers={"content-type": ctype})
                    assert_error_shape(res, spec, method, template)
                    calls += 1
    # Query strings: bad filters, cursors and SSE positions (of a run that exists: an unknown
    # run's stream is a 404 before its position is read).
    rid = api.post("/v1/runs", json={"query": "corpus run"}).json()["run_id"]
    for path, params in (("/v1/runs", {"status": "nope"}), ("/v1/runs", {"limit": 0}),
                         ("/v1/runs", {"cursor": "%%%"}), ("/v1/dags", {"status": "nope"}),
                         ("/v1/dags", {"cursor": "!!"}), ("/v1/batches", {"limit": 501}),
                         (f"/v1/runs/{rid}/events", {"after": "bogus"})):
        res = api.get(path, params=params)
        assert res.status_code == 422, (path, params, res.text[:200])
        template = path.replace(rid, "{run_id}")
        assert_error_shape(res, spec, "get", template)
        assert res.json()["error"]["field"] in params
        calls += 1
    res = api.get(f"/v1/runs/{rid}/events", headers={"Last-Event-ID": "x"})
    assert res.status_code == 422 and res.json()["error"]["field"] == "last-event-id"
    # A route or method that does not exist: the same shape.
    for method, path, status in (("GET", "/v1/nothing", 404), ("DELETE", "/v1/runs", 405), ("GET", "/v1/runs/", 404)):
        res = api.request(method, path)
        assert res.status_code == status, (method, path, res.status_code)
        assert ErrorResponse.model_validate(res.json()).error.code == ERROR_CODES[status]
    assert calls > 100
