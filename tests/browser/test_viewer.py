"""The run viewer (/ui) in headless Chromium against a real gateway, workers, Redis and the
scripted LLM (issue 15)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from tests.browser.conftest import GatewayProc, shot
from tests.integration.conftest import LLMFixture
from tests.scripted_server import first_user_text, reply_text, reply_tool_calls

pytestmark = [pytest.mark.browser, pytest.mark.integration]


def submit(gw: GatewayProc, query: str, **extra: Any) -> str:
    with gw.api() as c:
        res = c.post("/v1/runs", json={"query": query, **extra})
        assert res.status_code == 202, res.text
        return res.json()["run_id"]


def stream_events(gw: GatewayProc, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The run's whole event stream as the server holds it (after the run ended)."""
    out = []
    with gw.api() as c:
        with c.stream("GET", f"/v1/runs/{run_id}/events") as res:
            event = None
            for line in res.iter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    out.append((event, json.loads(line[6:])))
    return out


def wait_status(gw: GatewayProc, run_id: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    with gw.api() as c:
        while time.monotonic() < deadline:
            st = c.get(f"/v1/runs/{run_id}").json()["status"]
            if st in ("succeeded", "failed", "cancelled"):
                return st
            time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not end")


def test_runs_table_shows_a_new_run_within_a_second(gateway, page, llm: LLMFixture):
    page.goto(gateway.url + "/ui/#/runs")
    page.wait_for_selector("#runs-table tbody tr")
    q = llm.script(llm.unique("table"), [reply_text("ok")])
    run_id = submit(gateway, q)
    t0 = time.monotonic()
    page.wait_for_selector(f'tr[data-run-id="{run_id}"]', timeout=5000)
    seen_after = time.monotonic() - t0
    assert seen_after < 1.0, f"the new run showed after {seen_after:.2f} s"
    wait_status(gateway, run_id)
    page.wait_for_selector(f'tr[data-run-id="{run_id}"] .st-succeeded', timeout=5000)
    page.wait_for_selector(".chart svg")
    shot(page, "runs")
