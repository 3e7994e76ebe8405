"""The viewer's dashboard from the server: real runs on the session's workers (the scripted
LLM), read back from the run index and the metrics hashes by ``GET /v1/ui/dashboard``; the
example of ``docs/operations/monitoring.md`` run as written against a gateway process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid

import pytest
from fastapi.testclient import TestClient

from reactq.dispatcher.http import create_app
from reactq.shared.api.ops import Dashboard
from reactq.shared.observe.dashboard import MINUTES, WINDOW_S
from reactq.shared.keys import Keys
from reactq.shared.requests import RunRequest
from reactq.shared.stores.dashboard import DashboardStore
from tests.integration.conftest import ROOT, worker_env
from tests.integration.test_gateway import start_gateway, stop_gateway
from tests.scripted_server import reply_error, reply_text, reply_tool_calls
from tests.metrics_kit import settled

pytestmark = pytest.mark.integration


def _run_batch(dispatcher, llm, tenant: str) -> list[dict]:
    """Two runs that succeed (one with a tool turn), one that fails; their results."""
    qs = [llm.script(llm.unique("dash: 6*7"), [reply_tool_calls([("c1", "calculator", {"expression": "6*7"})]),
                                              reply_text("42")]),
          llm.script(llm.unique("dash: hello"), [reply_text("hello")]),
          llm.script(llm.unique("dash: broken"), [reply_error(400, {"error": {"message": "bad request"}})])]
    handles = [dispatcher.submit(RunRequest(query=q, mode="native"), tenant=tenant) for q in qs]
    return [h.result(timeout=30) for h in handles]


def test_the_last_hours_runs_by_status_and_tokens_of_a_tenant(workers, dispatcher, llm, r):
    tenant = f"dash{uuid.uuid4().hex[:8]}"
    store = DashboardStore(r, Keys())
    assert store.read(time.time(), tenant=tenant, cluster=False).points == []
    results = _run_batch(dispatcher, llm, tenant)
    assert [x["status"] for x in results] == ["succeeded", "succeeded", "failed"]
    reading = store.read(time.time(), tenant=tenant, cluster=False)
    assert sorted(p.status for p in reading.points) == ["failed", "succeeded", "succeeded"]
    assert not reading.truncated and reading.turn_buckets is None and reading.in_flight is None
    from reactq.shared.observe.dashboard import build

    d = Dashboard.model_validate(build(reading.points, time.time(), truncated=False, turn_buckets=None,
                                       in_flight=None, queues=None)).model_dump()
    assert d["runs"] == 3 and d["by_status"] == {"succeeded": 2, "failed": 1}
    used = sum((x.get("usage") or {}).get("total_tokens", 0) for x in results)
    assert used > 0 and d["tokens"]["total"] == used
    assert len(d["minutes"]) == MINUTES and d["window_s"] == WINDOW_S
    assert sum(sum(m["counts"].values()) for m in d["minutes"]) == 3
    assert sum(m["tokens"] for m in d["minutes"]) == used
    assert d["runs_per_minute"] == round(3 / MINUTES, 3)
    # An hour later the same runs are outside the window.
    assert store.read(time.time() + WINDOW_S + 120, tenant=tenant, cluster=False).points == []


def test_the_reads_are_capped_at_the_newest_runs(workers, dispatcher, llm, r):
    tenant = f"dash{uuid.uuid4().hex[:8]}"
    _run_batch(dispatcher, llm, tenant)
    reading = DashboardStore(r, Keys(), cap=2).read(time.time(), tenant=tenant, cluster=False)
    assert reading.truncated and len(reading.points) == 2


def test_the_route_gives_an_admin_the_cluster_figures(workers, dispatcher, llm, settings):
    with TestClient(create_app(settings)) as c:
        before = c.get("/v1/ui/dashboard").json()
        _run_batch(dispatcher, llm, "default")
        least = (before["turn_seconds"] or {"count": 0})["count"] + 3
        res = settled(lambda: c.get("/v1/ui/dashboard"),
                      lambda res: (res.json().get("turn_seconds") or {"count": 0})["count"] >= least)
    assert res.status_code == 200
    d = Dashboard.model_validate(res.json()).model_dump()
    assert d["runs"] >= before["runs"] + 3
    assert d["by_status"]["succeeded"] >= before["by_status"].get("succeeded", 0) + 2
    assert d["by_status"]["failed"] >= before["by_status"].get("failed", 0) + 1
    assert d["tokens"]["total"] > before["tokens"]["total"]
    turns = d["turn_seconds"]
    # Three turns at least (the tool turn, its answer, the plain answer), each timed.
    assert turns["count"] >= (before["turn_seconds"] or {"count": 0})["count"] + 3
    assert 0 < turns["p50"] <= turns["p95"] <= 300
    assert {"reactq.runs", "reactq.tools"} <= set(d["queue_depth"])
    assert d["in_flight"] is not None and d["in_flight"] >= 0


def test_the_monitoring_pages_example_runs_as_written(workers, dispatcher, llm, redis_url, tmp_path):
    doc = (ROOT / "docs" / "operations" / "monitoring.md").read_text()
    code = dict(re.findall(r'^```python title="([^"]+)"\n(.*?)^```', doc, re.M | re.S))["dashboard.py"]
    (tmp_path / "dashboard.py").write_text(code)
    _run_batch(dispatcher, llm, "default")
    gw = start_gateway(worker_env(redis_url, llm), tmp_path / "gateway.log", via_cli=False)
    try:
        out = subprocess.run([sys.executable, "dashboard.py"], cwd=tmp_path, capture_output=True, text=True,
                             env={**os.environ, "REACTQ_GATEWAY": gw.url}, timeout=60, check=True).stdout
    finally:
        stop_gateway(gw)
    lines = out.splitlines()
    assert re.match(r"\d+ runs in the last hour, [\d.]+ per minute", lines[0]) and int(lines[0].split()[0]) >= 3
    assert lines[1].startswith("by status: {") and "'succeeded'" in lines[1]
    assert int(lines[2].split(": ")[1]) > 0
    assert "'reactq.runs'" in lines[3] and "in flight:" in lines[3]
    assert re.match(r"turn time p50 [\d.]+ s, p95 [\d.]+ s over \d+ turns", lines[4])
