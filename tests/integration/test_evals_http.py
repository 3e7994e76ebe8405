"""``/v1/evals`` through the gateway (in-process) and the session's workers: create, get, cases,
list, compare; the one error shape; scopes; another tenant's eval is a 404."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.test_evals import case

pytestmark = pytest.mark.integration
TOKEN = "evals-admin-token-71c0"


@pytest.fixture(scope="module")
def http(redis_url: str, llm: Any, workers: Any, backend: Any) -> Iterator[dict[str, Any]]:
    from fastapi.testclient import TestClient

    from reactq.dispatcher.http import create_app
    from reactq.shared.settings import Settings

    settings = Settings(redis_url=redis_url, model="scripted", tools="tests.integration.tools:TOOLS", demo_tools=True,
                        openai_api_key="test-key", openai_base_url=llm.server.base_url, api_token=TOKEN,
                        **backend.settings(backend.env()))
    with TestClient(create_app(settings)) as client:
        admin = {"Authorization": f"Bearer {TOKEN}"}

        def key(tenant: str, scopes: list[str]) -> dict[str, str]:
            res = client.post("/v1/keys", json={"tenant": tenant, "scopes": scopes}, headers=admin)
            assert res.status_code == 201, res.text
            return {"Authorization": f"Bearer {res.json()['key']}"}

        yield {"client": client, "acme": key("acme", ["runs:read", "batches:write"]),
               "reader": key("acme", ["runs:read"]), "beta": key("beta", ["runs:read", "batches:write"])}


def wait_done(client: Any, eval_id: str, headers: dict[str, str]) -> dict[str, Any]:
    deadline = time.monotonic() + 90
    while True:
        view = client.get(f"/v1/evals/{eval_id}", headers=headers).json()
        if view["status"] != "running":
            return dict(view)
        assert time.monotonic() < deadline, view
        time.sleep(0.1)


def test_an_eval_over_http_and_compare_names_exactly_the_cases_that_flipped(http, llm):
    c, acme = http["client"], http["acme"]
    cases = [case(llm, "stays", "yes", "yes"), case(llm, "breaks", "yes", "yes"), case(llm, "fixed", "no", "yes")]
    made = c.post("/v1/evals", json={"name": "v1", "cases": [*cases, {"id": "bad", "query": ""}],
                                     "evaluators": ["exact"]}, headers=acme)
    assert made.status_code == 202, made.text
    first = made.json()
    assert first["total"] == 4 and [i["id"] for i in first["invalid"]] == ["bad"]
    assert "line 4" in first["invalid"][0]["error"] and "query" in first["invalid"][0]["error"]
    view = wait_done(c, first["eval_id"], acme)
    assert view["scores"]["exact"] == {"pass_rate": round(2 / 3, 6), "mean": round(2 / 3, 6), "scored": 3}
    assert view["counts"]["invalid"] == 1 and view["batch_id"] == first["batch_id"]
    assert c.get(f"/v1/batches/{first['batch_id']}", headers=acme).json()["total"] == 4

    page = c.get(f"/v1/evals/{first['eval_id']}/cases", params={"limit": 2}, headers=acme).json()
    assert [x["case_id"] for x in page["cases"]] == ["stays", "breaks"] and page["next_cursor"]
    rest = c.get(f"/v1/evals/{first['eval_id']}/cases", params={"cursor": page["next_cursor"]}, headers=acme).json()
    assert [x["case_id"] for x in rest["cases"]] == ["fixed", "bad"] and rest["next_cursor"] is None
    assert rest["cases"][0]["scores"]["exact"]["passed"] is False and rest["cases"][0]["run_id"]

    # The second eval: "breaks" now answers wrong, "fixed" right (the same ids, other scripts).
    again = [case(llm, "stays", "yes", "yes"), case(llm, "breaks", "nope", "yes"), case(llm, "fixed", "yes", "yes")]
    second = c.post("/v1/evals", json={"name": "v2", "cases": again, "evaluators": ["exact"]}, headers=acme).json()
    wait_done(c, second["eval_id"], acme)
    diff = c.get(f"/v1/evals/{first['eval_id']}/compare/{second['eval_id']}", headers=acme)
    assert diff.status_code == 200, diff.text
    got = diff.json()
    assert got["fixed"] == ["fixed"] and got["broken"] == ["breaks"]
    assert {x["case_id"] for x in got["cases"]} == {"fixed", "breaks"}
    assert got["deltas"]["pass_rate"] == 0.0

    listed = c.get("/v1/evals", headers=acme).json()["evals"]
    assert [e["name"] for e in listed[:2]] == ["v2", "v1"]
    assert c.get("/v1/evals", headers=http["beta"]).json()["evals"] == []


def test_eval_errors_have_the_one_shape_and_another_tenants_eval_is_not_found(http, llm):
    c, acme, beta = http["client"], http["acme"], http["beta"]
    ok = c.post("/v1/evals", json={"cases": [case(llm, "one", "a", "a")], "evaluators": ["contains"]}, headers=acme)
    eval_id = ok.json()["eval_id"]
    for path in (f"/v1/evals/{eval_id}", f"/v1/evals/{eval_id}/cases", f"/v1/evals/{eval_id}/compare/{eval_id}"):
        res = c.get(path, headers=beta)
        assert res.status_code == 404 and res.json()["error"]["code"] == "not_found", (path, res.text)
    assert c.get("/v1/evals/nope", headers=acme).status_code == 404
    refused = c.post("/v1/evals", json={"cases": [{"id": 1, "query": "q"}], "evaluators": ["exact"]},
                     headers=http["reader"])
    assert refused.status_code == 403 and "batches:write" in refused.json()["error"]["message"]
    assert c.get("/v1/evals", headers={}).status_code == 401
    bad_bodies = [
        ({"cases": [], "evaluators": ["exact"]}, "cases"),
        ({"cases": [{"id": 1, "query": "q"}], "evaluators": ["vibes"]}, "evaluators"),
        ({"cases": [{"id": 1, "query": "q"}], "evaluators": ["exact"], "model": "nobody"}, "model"),
        ({"cases": [{"id": 1, "query": "q"}], "evaluators": ["exact"], "replay_from": eval_id + "x"}, "replay_from"),
        ({"cases": [{"id": 1, "query": "q"}], "evaluators": ["exact"], "live_tools": True}, "live_tools"),
        ({"cases": [{"id": 1, "query": "q"}], "evaluators": ["exact"], "colour": 1}, "colour"),
    ]
    for body, field in bad_bodies:
        res = c.post("/v1/evals", json=body, headers=acme)
        assert res.status_code == 422, (body, res.text)
        err = res.json()["error"]
        assert err["code"] == "validation_error" and field in (err.get("field") or "") + err["message"], err
    # Replaying another tenant's eval is refused as if it did not exist.
    other = c.post("/v1/evals", json={"cases": [{"id": 1, "query": "q"}], "evaluators": ["exact"],
                                      "replay_from": eval_id}, headers=beta)
    assert other.status_code == 422 and other.json()["error"]["field"] == "replay_from"
    wait_done(c, eval_id, acme)


def test_the_python_clients_speak_evals(redis_url, llm, workers, tmp_path):
    import asyncio

    import reactq
    from tests.integration.conftest import worker_env
    from tests.integration.test_gateway import start_gateway, stop_gateway

    gw = start_gateway(worker_env(redis_url, llm), tmp_path / "gateway.log")
    try:
        with reactq.Client(gw.url) as client:
            made = client.evals.create([case(llm, "x", "yes", "yes"), case(llm, "y", "no", "yes")], ["exact"],
                                       name="client")
            done = client.evals.wait(made.eval_id, timeout=60)
            assert done.status == "done" and done.pass_rate == 0.5 and done.scores["exact"]["scored"] == 2
            assert [c["case_id"] for c in client.evals.cases(made.eval_id).cases] == ["x", "y"]
            assert made.eval_id in [e.eval_id for e in client.evals.list().evals]
            assert client.evals.compare(made.eval_id, made.eval_id).fixed == []
            with pytest.raises(reactq.NotFound):
                client.evals.get("no-such-eval")
            with pytest.raises(reactq.InvalidRequest) as exc:
                client.evals.create([{"id": 1, "query": "q"}], ["vibes"])
            assert exc.value.field == "evaluators"

        async def from_asyncio() -> Any:
            async with reactq.AsyncClient(gw.url) as aclient:
                return (await aclient.evals.get(made.eval_id)).pass_rate

        assert asyncio.run(from_asyncio()) == 0.5
    finally:
        stop_gateway(gw)
