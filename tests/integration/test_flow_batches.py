"""Batch budgets and batch cancel (issue 13), with real workers and the scripted server."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from reactq.dispatcher.batch.driver import BatchDriver
from reactq.dispatcher.batch.items import parse_lines
from tests.integration.flow_kit import USAGE, FlowCluster
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = [pytest.mark.integration, pytest.mark.flow]


@pytest.fixture
def cluster(redis_url: str, tmp_path) -> Iterator[FlowCluster]:
    c = FlowCluster(redis_url, tmp_path)
    yield c
    c.close()


def test_a_batch_budget_skips_the_lines_not_started(cluster: FlowCluster) -> None:
    c = cluster
    lines = [f'{{"id": "l{i}", "query": "{c.simple(f"budget line {i}")}"}}' for i in range(1, 6)]
    items = parse_lines(lines, validate=c.d.validate)
    assert all(it.request.priority == "batch" for it in items)  # batch lines default to batch
    out: list[dict[str, Any]] = []
    # one line at a time; each run pays 2 calls x 100 tokens: after two lines 400 < 500, the
    # third starts and its spend (read while it runs) takes the batch to >= 500
    driver = BatchDriver(c.d, "budget-test", 1, on_result=out.append, token_budget=500)
    tally = driver.run(items)
    by_id = {r["id"]: r for r in out}
    assert [by_id[f"l{i}"]["status"] for i in range(1, 6)] == ["succeeded"] * 3 + ["skipped"] * 2
    assert re.fullmatch(r"skipped: batch token budget reached \((500|600) of 500 tokens\)", by_id["l4"]["error"])
    assert by_id["l5"]["run_id"] is None
    assert tally.skipped == 2 and tally.stopped.startswith("token budget reached")


def test_http_batch_cancel_cancels_runs_and_skips_the_rest(cluster: FlowCluster) -> None:
    from fastapi.testclient import TestClient

    from reactq.dispatcher.http import create_app

    c = cluster
    slow = [reply_tool_calls([("s1", "slow", {"tag": "cancel", "seconds": 1.0})], usage=USAGE)] * 20
    queries = [c.book.script(f"cancel line {i}", slow + [reply_text("done", usage=USAGE)]) for i in range(6)]
    with TestClient(create_app(c.settings)) as http:
        bad = http.post("/v1/batches", json={"requests": [{"query": "x"}], "token_budget": 0})
        assert bad.status_code == 422 and "token_budget" in bad.text
        res = http.post("/v1/batches", json={"requests": [{"query": q} for q in queries],
                                             "concurrency": 2, "token_budget": 1_000_000})
        assert res.status_code == 202, res.text
        batch_id = res.json()["batch_id"]
        deadline = time.monotonic() + 30
        while http.get(f"/v1/batches/{batch_id}").json()["running"] < 2:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert http.post("/v1/batches/nope/cancel").status_code == 404
        assert http.post(f"/v1/batches/{batch_id}/cancel").status_code == 202
        while (view := http.get(f"/v1/batches/{batch_id}", params={"results": True}).json())["status"] == "running":
            assert time.monotonic() < deadline + 30
            time.sleep(0.1)
        assert view["status"] == "cancelled" and view["stopped"] == "cancelled"
        statuses = sorted(r["status"] for r in view["results"])
        assert statuses == ["cancelled"] * 2 + ["skipped"] * 4
        assert all(r["error"] == "skipped: batch cancelled" for r in view["results"] if r["status"] == "skipped")
        assert http.post(f"/v1/batches/{batch_id}/cancel").status_code == 409


def test_cli_batch_cancel_names_an_unknown_batch(cluster: FlowCluster, monkeypatch) -> None:
    from typer.testing import CliRunner

    from reactq.dispatcher.cli import app

    monkeypatch.setenv("REACTQ_REDIS_URL", cluster.url)
    res = CliRunner().invoke(app, ["batch-cancel", "no-such-batch"])
    assert res.exit_code == 2 and "no batch with id 'no-such-batch'" in res.output
