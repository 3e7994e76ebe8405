"""Dollar caps and a tenant's request rate through real workers: a run's ``cost_budget_usd``,
a batch's (held by every call of its runs in flight) and a tenant's ``cost_per_day_usd`` stop
on the call that reaches them (the summary path, ``error`` kind ``budget``) — tool selection
and its structured-output repairs included — the spend survives a worker killed with -9, a
DAG's own calls (planner, analyzer, synthesis) count in its tenant's day and stop at its cap,
and a cap over a model without a price is refused at the door."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reactq.dispatcher.dag import DagDispatcher
from reactq.shared.errors import RequestError
from reactq.shared.keys import Keys
from reactq.shared.requests import DagRequest, RunRequest
from reactq.shared.stores.spend import TenantSpend, today
from tests.integration.flow_kit import FlowCluster
from tests.scripted_server import first_user_text, reply_text, reply_tool_calls

pytestmark = pytest.mark.integration

PRICE = "{ input_per_mtok = 2.5, output_per_mtok = 10.0 }"
TURN = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}  # $0.0035 a call
CALL_USD = 0.0035


@pytest.fixture(scope="module")
def cluster(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlowCluster]:
    tmp = tmp_path_factory.mktemp("caps")
    tenants = tmp / "tenants.toml"
    tenants.write_text("[tenants.thrifty]\ncost_per_day_usd = 0.006\n[tenants.metered]\nrpm = 120\n"
                       "[tenants.planner]\ncost_per_day_usd = 0.006\n[tenants.halfway]\ncost_per_day_usd = 0.009\n")
    c = FlowCluster(redis_url, tmp, limits={"price": PRICE}, workers=1, REACTQ_TENANTS=str(tenants))
    c.settings = c.settings.model_copy(update={"tenants": tenants})
    c.d.settings = c.settings
    c.tenants_file = tenants  # type: ignore[attr-defined]
    yield c
    c.close()


def _tool_turns(c: FlowCluster, text: str, seconds: float = 0.0) -> str:
    turn = reply_tool_calls([("c1", "slow", {"tag": "cap", "seconds": seconds})], usage=TURN)
    return c.book.script(text, [turn], synthesis=reply_text("summary", usage=TURN))


def _requests(c: FlowCluster, query: str) -> int:
    return sum(1 for r in c.server.requests if query in first_user_text(r.body))


def _events(c: FlowCluster, run_id: str) -> list[Any]:
    return [e for _, e in c.d.handle(run_id).events(timeout=30)]


def test_a_run_stops_on_the_call_that_reaches_its_cost_budget(cluster: FlowCluster) -> None:
    q = _tool_turns(cluster, "caps: keep calling tools")
    h = cluster.d.submit(RunRequest(query=q, mode="native", cost_budget_usd=0.006))
    result = h.result(timeout=30)
    # $0.0035 after the first call (under the cap), $0.007 after the second: the last.
    assert _requests(cluster, q) == 2
    assert result["usage"]["cost_usd"] == pytest.approx(2 * CALL_USD, abs=1e-12)
    assert result["status"] == "succeeded"
    (budget,) = [e for e in _events(cluster, h.run_id) if e.channel == "error"]
    assert budget.data["kind"] == "budget" and budget.data["cap"] == "run"
    assert budget.data["cost_budget_usd"] == 0.006


def test_the_spend_survives_a_worker_killed_with_minus_9(cluster: FlowCluster) -> None:
    q = _tool_turns(cluster, "caps: a worker dies mid-run", seconds=2.0)
    h = cluster.d.submit(RunRequest(query=q, mode="native", cost_budget_usd=0.006))
    deadline = time.monotonic() + 20
    while _requests(cluster, q) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the first call's spend is recorded; its tool sleeps
    cluster.workers[0].kill()
    models = Path(cluster.tenants_file).parent / "models.toml"  # type: ignore[attr-defined]
    cluster.workers.append(cluster.factory.start("caps-after", REACTQ_MODELS=str(models),
                                                 REACTQ_TENANTS=str(cluster.tenants_file),  # type: ignore[attr-defined]
                                                 REACTQ_FLOW_COMPLETION_ESTIMATE="32"))
    result = h.result(timeout=60)
    assert _requests(cluster, q) == 2  # the dead worker's spend was not forgotten
    assert result["usage"]["cost_usd"] >= 0.006


def test_a_tenants_daily_cap_stops_its_runs_and_not_the_others(cluster: FlowCluster) -> None:
    q1 = cluster.book.script("caps: thrifty's first", [reply_text("one", usage=TURN)],
                             synthesis=reply_text("first answer", usage=TURN))
    r1 = cluster.d.submit(RunRequest(query=q1), tenant="thrifty").result(timeout=30)
    assert r1["answer"] == "first answer"  # $0.0035 spent before the synthesis: under the cap
    q2 = cluster.book.script("caps: thrifty's second", [reply_text("two", usage=TURN)])
    h2 = cluster.d.submit(RunRequest(query=q2), tenant="thrifty")
    assert h2.result(timeout=30)["status"] == "succeeded"
    assert _requests(cluster, q2) == 0  # $0.007 spent today: no call at all
    (budget,) = [e for e in _events(cluster, h2.run_id) if e.channel == "error"]
    assert budget.data["kind"] == "budget" and budget.data["cap"] == "tenant"
    q3 = cluster.book.script("caps: another tenant", [reply_text("three", usage=TURN)],
                             synthesis=reply_text("third answer", usage=TURN))
    assert cluster.d.submit(RunRequest(query=q3), tenant="other").result(timeout=30)["answer"] == "third answer"


def test_a_cap_over_a_model_without_a_price_is_refused_at_the_door(workers: Any, dispatcher: Any) -> None:
    with pytest.raises(RequestError) as exc:
        dispatcher.submit(RunRequest(query="q", cost_budget_usd=1.0))
    assert exc.value.field == "cost_budget_usd" and "no price" in str(exc.value)


def test_a_tenants_rpm_paces_its_calls_across_its_runs(cluster: FlowCluster) -> None:
    """rpm = 120: one call admitted every 0.5 s across all of the tenant's runs (the
    cluster-wide limiter, zero burst), whatever the model allows."""
    warm = cluster.book.script("caps: warm-up", [reply_text("w")], synthesis=reply_text("w"))
    cluster.d.submit(RunRequest(query=warm), tenant="other").result(timeout=30)
    qs = [cluster.book.script(f"caps: metered {n}", [reply_text(f"m{n}")], synthesis=reply_text("ok"))
          for n in range(3)]
    handles = [cluster.d.submit(RunRequest(query=q), tenant="metered") for q in qs]
    assert all(h.result(timeout=60)["status"] == "succeeded" for h in handles)
    times = sorted(r.received_at for r in cluster.server.requests
                   if any(q in first_user_text(r.body) for q in qs))
    assert len(times) == 6
    # Six calls paced 0.5 s apart span 2.5 s (a loaded machine may bunch their arrivals a
    # little: the pace is of admissions).
    assert times[-1] - times[0] >= 1.8, times
    assert int(cluster.r.hget("reactq:flow:{tenant:metered}", "calls") or 0) == 6


# -- tool selection: a call like the others ---------------------------------------------------

@pytest.fixture(scope="module")
def selecting(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlowCluster]:
    """Workers that select tools for every run (a threshold of 2 under the test catalog)."""
    tmp = tmp_path_factory.mktemp("caps-selecting")
    tenants = tmp / "tenants.toml"
    tenants.write_text("[tenants.picky]\ncost_per_day_usd = 0.006\n")
    c = FlowCluster(redis_url, tmp, limits={"price": PRICE}, workers=1, REACTQ_TENANTS=str(tenants),
                    REACTQ_TOOL_SELECTION_THRESHOLD="2")
    yield c
    c.close()


def _spent_today(c: FlowCluster, tenant: str, usd: float) -> None:
    """The tenant's day as earlier calls left it: ``usd`` settled."""
    spend = TenantSpend(c.r, Keys())
    spend.settle_op(tenant, "earlier", usd).run(c.r)


def test_tool_selection_is_held_against_the_tenants_daily_cap(selecting: FlowCluster) -> None:
    _spent_today(selecting, "picky", 0.007)
    q = selecting.book.script("caps: picky picks tools", [reply_text("one", usage=TURN)],
                              synthesis=reply_text("answer", usage=TURN))
    h = selecting.d.submit(RunRequest(query=q), tenant="picky")
    assert h.result(timeout=30)["status"] == "succeeded"
    assert _requests(selecting, q) == 0  # not even the selection call
    (budget,) = [e for e in _events(selecting, h.run_id) if e.channel == "error"]
    assert budget.data["kind"] == "budget" and budget.data["cap"] == "tenant"


def test_selections_repair_attempts_are_held_against_the_run_budget(selecting: FlowCluster) -> None:
    """The selection's first attempt ($0.0035) reaches a $0.003 budget: its structured-output
    repairs (the next levels) are refused before they are sent, and the run ends on the
    budget path."""
    q = selecting.book.script("caps: selection that never parses", [reply_text("no JSON here", usage=TURN)],
                              synthesis=reply_text("answer", usage=TURN))
    h = selecting.d.submit(RunRequest(query=q, cost_budget_usd=0.003))
    result = h.result(timeout=30)
    assert result["status"] == "succeeded"
    assert _requests(selecting, q) == 1
    assert result["usage"]["cost_usd"] == pytest.approx(CALL_USD, abs=1e-12)
    (budget,) = [e for e in _events(selecting, h.run_id) if e.channel == "error"]
    assert budget.data["kind"] == "budget" and budget.data["cap"] == "run"


# -- a DAG's own calls --------------------------------------------------------------------------

def _dag_script(c: FlowCluster, uid: str) -> tuple[str, str]:
    goal, task = f"Capped goal {uid}", f"Capped task {uid}"
    plan = json.dumps({"steps": [{"id": "A", "task": task}]})
    c.book.script(f"Goal: {goal}", [reply_text(plan, usage=TURN)], synthesis=reply_text(f"dag answer {uid}", usage=TURN))
    c.book.script(f"Goal to evaluate: {goal}",
                  [reply_text(json.dumps({"achieved": True, "confidence": 0.9, "reasoning": "ok"}), usage=TURN)])
    c.book.script(f"Task: {task}", [reply_text("step done", usage=TURN)], synthesis=reply_text(f"result {uid}", usage=TURN))
    return goal, task


def _dag_events(c: FlowCluster, dag_id: str) -> list[Any]:
    return [e for _, e in DagDispatcher(c.settings).handle(dag_id).events()]


def test_a_dags_own_calls_count_in_its_tenants_day_and_its_totals(cluster: FlowCluster) -> None:
    goal, _ = _dag_script(cluster, uuid.uuid4().hex[:8])
    h = DagDispatcher(cluster.settings).submit(DagRequest(goal=goal), tenant="dagger")
    result = h.result(timeout=60)
    assert result["status"] == "succeeded", result
    # Planner, the step's turn and synthesis, analyzer, synthesis: five priced calls.
    assert result["usage"]["cost_usd"] == pytest.approx(5 * CALL_USD, abs=1e-9)
    assert TenantSpend(cluster.r, Keys()).spent("dagger") == pytest.approx(5 * CALL_USD, abs=1e-9)
    assert not [k for k in cluster.r.hkeys(Keys().tenant_spend("dagger", today())) if k.startswith(b"r:")]


def test_a_dags_planner_is_refused_at_its_tenants_daily_cap(cluster: FlowCluster) -> None:
    _spent_today(cluster, "planner", 0.007)
    goal, _ = _dag_script(cluster, uuid.uuid4().hex[:8])
    h = DagDispatcher(cluster.settings).submit(DagRequest(goal=goal), tenant="planner")
    result = h.result(timeout=30)
    assert result["status"] == "failed"
    assert _requests(cluster, goal) == 0
    (budget,) = [e for e in _dag_events(cluster, h.dag_id) if e.channel == "error"]
    assert (budget.data["kind"], budget.data["cap"], budget.data["cost_budget_usd"]) == ("budget", "tenant", 0.006)
    assert "daily cost cap reached" in budget.data["message"]
    stops = sum(int(cluster.r.hget(key, '["dag_tenant_cost"]') or 0) for key in Keys().metrics_all("flow_budget_stops"))
    assert stops >= 1


def test_a_dags_analyzer_refused_at_the_cap_answers_from_its_steps(cluster: FlowCluster) -> None:
    """$0.009 a day: the planner and the step's two calls spend $0.0105; the analyzer is
    refused, and the step's result is the answer."""
    uid = uuid.uuid4().hex[:8]
    goal, _ = _dag_script(cluster, uid)
    h = DagDispatcher(cluster.settings).submit(DagRequest(goal=goal), tenant="halfway")
    result = h.result(timeout=60)
    assert result["status"] == "succeeded" and f"result {uid}" in result["answer"]
    assert _requests(cluster, f"Goal to evaluate: {goal}") == 0
    assert result["usage"]["cost_usd"] == pytest.approx(3 * CALL_USD, abs=1e-9)
    (budget,) = [e for e in _dag_events(cluster, h.dag_id) if e.channel == "error"]
    assert (budget.data["kind"], budget.data["cap"]) == ("budget", "tenant")


# -- a batch's dollar cap: held before every call of its runs ----------------------------------

# $0.0038 a call: never more than the call's reservation (its prompt estimate — the tool
# schemas alone are over 1,500 tokens — plus the workers' completion allowance of 32).
HEAVY = {"prompt_tokens": 1400, "completion_tokens": 30, "total_tokens": 1430}
HEAVY_USD = 0.0038


def _batch_view(http: Any, batch_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while (view := http.get(f"/v1/batches/{batch_id}", params={"results": True}).json())["status"] == "running":
        assert time.monotonic() < deadline, view
        time.sleep(0.1)
    return view  # type: ignore[no-any-return]


def test_a_batchs_cost_budget_stops_the_calls_of_its_runs_in_flight(cluster: FlowCluster) -> None:
    """Three runs in flight keep calling tools (each would make 13 calls): the batch's $0.02
    is held before each of their calls, so together they stop at the call that reaches it —
    over the cap by no more than the calls then in flight cost (one a run, each held at least
    its cost) — and each ends ``succeeded`` on the budget path naming the batch's cap. Lines
    not started are skipped."""
    from fastapi.testclient import TestClient

    from reactq.dispatcher.http import create_app

    uid, cap, concurrency = uuid.uuid4().hex[:8], 0.02, 3
    turn = reply_tool_calls([("c1", "slow", {"tag": "batch-cap", "seconds": 0.0})], usage=HEAVY)
    qs = [cluster.book.script(f"caps: batch {uid} line {n}", [turn], synthesis=reply_text("answer", usage=HEAVY))
          for n in range(10)]
    with TestClient(create_app(cluster.settings)) as http:
        res = http.post("/v1/batches", json={"requests": [{"query": q, "mode": "native", "max_iterations": 12}
                                                          for q in qs],
                                             "concurrency": concurrency, "cost_budget_usd": cap})
        assert res.status_code == 202, res.text
        view = _batch_view(http, res.json()["batch_id"])
    lines = view["results"]
    started = [line for line in lines if line["run_id"] is not None]
    spent = sum(line["usage"]["cost_usd"] for line in started)
    assert cap <= spent <= cap + concurrency * HEAVY_USD, spent
    assert view["cost_usd"] == pytest.approx(spent, abs=1e-9)
    assert sum(_requests(cluster, q) for q in qs) == round(spent / HEAVY_USD)
    for line in started:
        assert line["status"] == "succeeded", line
        (budget,) = [e for e in _events(cluster, line["run_id"]) if e.channel == "error"]
        assert (budget.data["kind"], budget.data["cap"], budget.data["cost_budget_usd"]) == ("budget", "batch", cap)
        assert "batch's cost budget reached" in budget.data["message"]
    skipped = [line for line in lines if line["status"] == "skipped"]
    assert skipped and len(skipped) + len(started) == len(qs)
    assert all("cost budget reached" in line["error"] for line in skipped)
    ledger = cluster.r.hgetall(Keys().batch_spend(view["batch_id"]))
    assert float(ledger[b"spent"]) == pytest.approx(spent, abs=1e-9)
    assert float(ledger.get(b"held", 0)) == 0.0
