"""The runs page's dashboard in headless Chromium, opened only after a batch has finished:
every figure comes from the server (``GET /v1/ui/dashboard``), so none is a dash."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.browser.conftest import GatewayProc, shot
from tests.browser.test_viewer import wait_js
from tests.integration.conftest import LLMFixture
from tests.scripted_server import reply_text, reply_tool_calls
from tests.metrics_kit import settled

pytestmark = [pytest.mark.browser, pytest.mark.integration]


def _batch_to_the_end(gw: GatewayProc, llm: LLMFixture) -> str:
    tool_q = llm.script(llm.unique("dash: 2+3"), [reply_tool_calls([("c1", "add", {"a": 2, "b": 3})]),
                                                  reply_text("5")], synthesis=reply_text("five"))
    plain = [llm.script(llm.unique(f"dash: hello {i}"), [reply_text(f"hello {i}")]) for i in range(2)]
    with gw.api() as c:
        res = c.post("/v1/batches", json={"requests": [{"query": tool_q, "tools": ["add"]}]
                                          + [{"query": q} for q in plain]})
        assert res.status_code == 202, res.text
        batch_id = res.json()["batch_id"]
        deadline = time.monotonic() + 60
        while (body := c.get(f"/v1/batches/{batch_id}").json())["status"] != "done":
            assert time.monotonic() < deadline, body
            time.sleep(0.2)
        settled(lambda: c.get("/v1/ui/dashboard").json(), lambda d: (d["turn_seconds"] or {}).get("count"))
    return batch_id


def _figures(page: Any) -> dict[str, str]:
    return dict(page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('.dash .chart')]
        .map(c => [c.dataset.fig, c.querySelector('.now').textContent]))"""))


def test_a_page_opened_after_a_batch_shows_the_hours_figures(gateway, page, llm: LLMFixture):
    _batch_to_the_end(gateway, llm)
    with gateway.api() as c:
        server = c.get("/v1/ui/dashboard").json()
    assert server["by_status"].get("succeeded", 0) >= 3
    page.goto(gateway.url + "/ui/#/runs")
    # The first reading is the whole hour: no second sample is needed for a rate.
    wait_js(page, "document.querySelectorAll('.dash .chart').length === 5", timeout=5)
    figs = _figures(page)
    assert set(figs) == {"runs", "status", "tokens", "queue", "turns"}
    assert not [k for k, v in figs.items() if "–" in v], figs
    runs = int(figs["runs"].split("·")[1].split()[0].replace(",", ""))
    assert runs >= 3 and figs["runs"].split()[0] != "0.00"
    assert "succeeded" in figs["status"]
    assert int(figs["tokens"].split()[0].replace(",", "")) > 0
    assert figs["queue"].endswith("waiting")
    p50, p95 = figs["turns"].split(" / ")
    assert p50.endswith(("ms", "s")) and p95.endswith(("ms", "s"))
    # The runs chart draws the hour's minutes, and the minute of the batch is not empty.
    assert page.evaluate("document.querySelectorAll('.dash [data-fig=runs] polyline').length") == 4
    shot(page, "dashboard")
