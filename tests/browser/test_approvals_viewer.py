"""The run page's approvals in headless Chromium: a waiting call shows its arguments with
Approve / Reject / Edit; an edit runs the edited arguments; the runs list filters ``waiting``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import shot
from tests.browser.test_viewer import submit, wait_js, wait_status
from tests.integration.conftest import LLMFixture
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = [pytest.mark.browser, pytest.mark.integration]


def _waiting_run(gateway: Any, llm: LLMFixture, tag: str) -> str:
    q = llm.unique(f"viewer approval {tag}")
    llm.script(q, [reply_tool_calls([("call-a1", "transfer", {"tag": tag, "amount": 7})]), reply_text("ok")],
               synthesis=reply_text("ok"))
    return submit(gateway, q, completion_check=False)


def test_an_edit_from_the_run_page_runs_the_edited_arguments(gateway: Any, page: Any, llm: LLMFixture) -> None:
    run_id = _waiting_run(gateway, llm, "ui-edit")
    page.goto(gateway.url + f"/ui/#/run/{run_id}")
    page.wait_for_selector("article.approval", timeout=30000)
    card = page.locator("article.approval")
    assert '"amount": 7' in card.locator("textarea").input_value()
    assert page.locator("#run-status .badge").inner_text() == "waiting"
    shot(page, "approval-pending")
    card.locator("button.edit").click()
    card.locator("textarea").fill('{"tag": "ui-edit", "amount": 3}')
    card.locator("button.approve").click()
    wait_js(page, "document.getElementById('approval-note').textContent.includes('edited')")
    page.wait_for_selector("#footer .badge", timeout=30000)
    assert wait_status(gateway, run_id) == "succeeded"
    assert page.locator("#approvals-section").is_hidden()
    assert "moved 3 (ui-edit)" in page.locator('article.tool[data-call-id="call-a1"]').inner_text()


def test_reject_from_the_run_page_and_the_waiting_filter(gateway: Any, page: Any, llm: LLMFixture) -> None:
    run_id = _waiting_run(gateway, llm, "ui-reject")
    page.goto(gateway.url + "/ui/#/runs")
    page.wait_for_selector("#f-status")
    page.select_option("#f-status", "waiting")
    page.wait_for_selector(f'a[href="#/run/{run_id}"]', timeout=30000)
    page.goto(gateway.url + f"/ui/#/run/{run_id}")
    page.wait_for_selector("article.approval", timeout=30000)
    page.locator("article.approval input").fill("not today")
    page.locator("article.approval button.reject").click()
    page.wait_for_selector("#footer .badge", timeout=30000)
    assert wait_status(gateway, run_id) == "succeeded"
    assert "did not approve" in page.locator('article.tool[data-call-id="call-a1"]').inner_text()
