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
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = [pytest.mark.browser, pytest.mark.integration]


def wait_js(page: Any, expression: str, timeout: float = 10.0) -> None:
    """Poll a JS expression with page.evaluate (Playwright's wait_for_function evaluates
    strings with eval inside the page, which the viewer's Content-Security-Policy forbids)."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"timed out waiting for {expression}"
        time.sleep(0.1)


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
    # The dashboard is the server's reading: figures at once, not after a second sample.
    wait_js(page, "!document.querySelector('.chart .now').textContent.includes('–')", timeout=10)
    shot(page, "runs")
    # Search by id: the header's box opens the run.
    page.fill("#open-id", run_id)
    page.press("#open-id", "Enter")
    page.wait_for_selector("#footer .st-succeeded", timeout=10000)
    assert page.url.endswith(f"#/run/{run_id}")


def _page_events(page: Any) -> list[tuple[int, str]]:
    """(seq, channel) of every event the page rendered, from its raw-event log."""
    return [(int(s), c) for s, c in page.eval_on_selector_all(
        "#event-log li", "els => els.map(e => [e.dataset.seq, e.dataset.channel])")]


def test_run_page_streams_deltas_in_order_and_shows_the_tool_card(gateway, page, llm: LLMFixture):
    q = llm.unique("weather")
    answer = "It is sunny in Lisbon today, twenty-two degrees, light wind from the north."
    llm.script(q, [reply_tool_calls([("call-w1", "slow", {"tag": "lisbon", "seconds": 0.2})]),
                   reply_text("enough")],
               synthesis=reply_text(answer, chunk_chars=4, chunk_delay=0.03))
    page.goto(gateway.url + "/ui/#/runs")
    page.wait_for_selector("#runs-table")
    run_id = submit(gateway, q)
    # Record every delta as it is appended: the page must grow the answer token by token.
    page.evaluate("window.location.hash = '#/run/" + run_id + "'")
    page.wait_for_selector("#answer")
    page.evaluate("""() => { window.__deltas = [];
        new MutationObserver(ms => ms.forEach(m => m.addedNodes.forEach(n => n.dataset && n.dataset.seq &&
            window.__deltas.push([+n.dataset.seq, document.getElementById('answer').textContent.length]))))
        .observe(document.getElementById('answer'), {childList: true}); }""")
    page.wait_for_selector("#footer .badge", timeout=30000)
    card = page.locator('article.tool[data-call-id="call-w1"]')
    assert card.locator(".name").inner_text() == "slow"
    assert "lisbon" in card.locator(".args").inner_text()
    assert "lisbon" in card.locator(".observation").inner_text()
    assert page.locator("#answer").inner_text() == answer
    deltas = page.evaluate("window.__deltas")
    seqs = [s for s, _ in deltas]
    assert len(deltas) >= 5 and seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert [n for _, n in deltas] == sorted(n for _, n in deltas)  # text grew with each delta
    server = stream_events(gateway, run_id)
    assert _page_events(page) == [(d["seq"], ch) for ch, d in server]
    assert page.locator("#footer").inner_text().startswith("succeeded")
    shot(page, "run")


def test_the_run_page_survives_a_gateway_restart_mid_run_with_each_event_once(
        gateway, page, llm: LLMFixture):
    q = llm.unique("restart")
    answer = " ".join(f"word{i}" for i in range(40))
    llm.script(q, [reply_tool_calls([("call-r1", "slow", {"tag": "restart", "seconds": 1.5})]),
                   reply_text("done with tools")],
               synthesis=reply_text(answer, chunk_chars=6, chunk_delay=0.05))
    run_id = submit(gateway, q)
    resumed_from: list[str] = []
    page.on("request", lambda req: req.url.endswith("/events") and resumed_from.append(
        req.headers.get("last-event-id", "")))
    page.goto(gateway.url + f"/ui/#/run/{run_id}")
    page.wait_for_selector('article.tool[data-call-id="call-r1"]')  # live, mid-run
    gateway.kill()
    page.wait_for_selector('#conn[data-state="reconnecting"]', timeout=10000)
    time.sleep(1.0)  # the run goes on without the gateway: events pile up in Redis
    gateway.start()
    page.wait_for_selector("#footer .badge", timeout=40000)
    server = stream_events(gateway, run_id)
    shown = _page_events(page)
    assert shown == [(d["seq"], ch) for ch, d in server], "each event exactly once, in order"
    assert page.locator("#answer").inner_text() == answer
    assert page.locator("article.tool").count() == 1
    # It resumed where it was (Last-Event-ID), not from the start.
    assert resumed_from[0] == "" and len(resumed_from) >= 2 and all(resumed_from[1:]), resumed_from


def test_the_interrupt_box_reaches_the_runs_next_llm_request(gateway, page, llm: LLMFixture):
    q = llm.unique("interrupt")
    # A long tool call: the run is surely still in it when the message is sent, even on a
    # loaded machine.
    llm.script(q, [reply_tool_calls([("call-i1", "slow", {"tag": "intr", "seconds": 5.0})]),
                   reply_text("noted")], synthesis=reply_text("answer with your note"))
    run_id = submit(gateway, q)
    page.goto(gateway.url + f"/ui/#/run/{run_id}")
    page.wait_for_selector('article.tool[data-call-id="call-i1"]')
    note = f"please also mention the moon {uuid.uuid4().hex[:6]}"
    page.fill("#interrupt-text", note)
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")  # the Send button, reached by keyboard
    wait_js(page, "document.getElementById('run-note').textContent.length > 0")
    assert page.locator("#run-note").inner_text().startswith("Sent"), page.locator("#run-note").inner_text()
    page.wait_for_selector("article.inject", timeout=30000)
    page.wait_for_selector("#footer .badge", timeout=30000)
    later = [r for r in llm.requests_for(q) if note in json.dumps(r.get("messages", []))]
    assert later, "the interrupt is in a later LLM request"
    assert note in page.locator("article.inject").inner_text()


def test_the_cancel_button_ends_the_run_cancelled(gateway, page, llm: LLMFixture):
    q = llm.unique("cancel")
    llm.script(q, [reply_tool_calls([(f"call-c{i}", "slow", {"tag": f"c{i}", "seconds": 1.0})])
                   for i in range(1, 30)])
    run_id = submit(gateway, q)
    page.goto(gateway.url + f"/ui/#/run/{run_id}")
    page.wait_for_selector("article.tool")
    page.click("#cancel-run")
    page.wait_for_selector("#footer .st-cancelled", timeout=30000)
    assert wait_status(gateway, run_id) == "cancelled"
    assert page.locator("#run-status .badge").inner_text() == "cancelled"
    assert page.locator("#cancel-run").is_disabled()


def test_the_batch_page_shows_progress_runs_and_cancel(gateway, page, llm: LLMFixture):
    qs = [llm.script(llm.unique(f"batch line {i}"),
                     [reply_tool_calls([(f"call-b{i}", "slow", {"tag": f"b{i}", "seconds": 0.6})]),
                      reply_text("fine")], synthesis=reply_text(f"answer {i}")) for i in range(6)]
    with gateway.api() as c:
        res = c.post("/v1/batches", json={"requests": [{"query": q} for q in qs] + [{"query": ""}],
                                          "concurrency": 2})
        assert res.status_code == 202, res.text
        batch_id = res.json()["batch_id"]
    page.goto(gateway.url + f"/ui/#/batch/{batch_id}")
    page.wait_for_selector('#batch-counts [data-count="total"]')
    assert page.locator('#batch-counts [data-count="total"] b').inner_text() == "7"
    wait_js(page, "document.querySelectorAll('#main tbody tr').length >= 2", timeout=20)
    wait_js(page, "+document.querySelector('#batch-counts [data-count=\"succeeded\"] b').textContent >= 2", timeout=30)
    shot(page, "batch")
    page.click("#cancel-batch")
    # POST /v1/batches/{id}/cancel: the runs in flight are cancelled, the rest skipped.
    wait_js(page, "document.getElementById('batch-note').textContent.length > 0", timeout=10)
    note = page.locator("#batch-note").inner_text()
    assert note.startswith("Cancel requested"), note
    page.wait_for_selector("#batch-status .st-cancelled", timeout=60000)
    assert page.locator('#batch-counts [data-count="invalid"] b').inner_text() == "1"
    assert page.locator("#cancel-batch").is_disabled()


def _script_diamond(llm: LLMFixture, uid: str) -> tuple[str, dict[str, str]]:
    goal = f"Compare left and right [{uid}]"
    tasks = {k: f"{v} {uid}" for k, v in {"A": "Collect the inputs", "B": "Measure the left side",
                                         "C": "Measure the right side", "D": "Compare both"}.items()}
    llm.script(f"Goal to evaluate: {goal}",
               [reply_text(json.dumps({"achieved": True, "confidence": 0.9, "reasoning": "complete"}))])
    llm.script(f"Goal: {goal}", [reply_text(json.dumps({"steps": []}))],
               synthesis=reply_text(f"left beats right {uid}"))
    for k, task in tasks.items():
        turns = [reply_tool_calls([(f"call-{k}-{uid}", "slow", {"tag": f"{k}-{uid}", "seconds": 0.8})]),
                 reply_text(f"{k} finished")]
        llm.script(f"Task: {task}", turns, synthesis=reply_text(f"result-{k}-{uid}"))
    return goal, tasks


def test_the_dag_page_shows_a_diamonds_four_nodes_going_green(gateway, page, llm: LLMFixture):
    uid = uuid.uuid4().hex[:8]
    goal, tasks = _script_diamond(llm, uid)
    steps = [{"id": "A", "task": tasks["A"]},
             {"id": "B", "task": tasks["B"], "dependencies": ["A"]},
             {"id": "C", "task": tasks["C"], "dependencies": ["A"]},
             {"id": "D", "task": tasks["D"], "dependencies": ["B", "C"]}]
    with gateway.api() as c:
        res = c.post("/v1/dags", json={"goal": goal, "steps": steps})
        assert res.status_code == 202, res.text
        dag_id = res.json()["dag_id"]
    page.goto(gateway.url + f"/ui/#/dag/{dag_id}")
    page.wait_for_selector("#dag-svg g.node")
    assert page.locator("#dag-svg g.node").count() == 4
    assert page.locator("#dag-svg path.edge").count() == 4
    seen: set[tuple[str, ...]] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        states = tuple(page.eval_on_selector_all(
            "#dag-svg g.node", "els => els.map(e => e.dataset.stepId + ':' + e.dataset.status)"))
        seen.add(states)
        if all(s.endswith(":completed") for s in states):
            break
        time.sleep(0.1)
    assert sorted(states) == ["A:completed", "B:completed", "C:completed", "D:completed"]
    # It moved live: the page showed the plan before every node was green.
    assert any(not all(s.endswith(":completed") for s in st) for st in seen)
    assert page.locator("#dag-svg a").count() == 4  # each step links to its run
    wait_js(page, f"document.getElementById('dag-answer').textContent.includes('left beats right {uid}')",
            timeout=30)
    assert "Round 1: achieved" in page.locator("#dag-rounds").inner_text()
    shot(page, "dag")


def test_with_a_token_the_page_shows_nothing_but_the_prompt(token_gateway, page, llm: LLMFixture):
    page.goto(token_gateway.url + "/ui/#/runs")
    page.wait_for_selector("#login:not([hidden])")
    assert page.locator("#top").is_hidden()
    assert page.locator("#view").inner_html().strip() == ""
    visible = page.locator("body").inner_text().replace("Skip to content", "").split()
    assert visible == page.locator("#login").inner_text().split()
    shot(page, "login")
    # With the token: the API answers, and the event stream is read with it (a header, no URL).
    q = llm.script(llm.unique("with token"), [reply_text("ok")], synthesis=reply_text("tokened answer"))
    with token_gateway.api("s3cret-token") as c:
        run_id = c.post("/v1/runs", json={"query": q}).json()["run_id"]
    urls: list[str] = []
    page.on("request", lambda req: urls.append(req.url))
    page.fill("#token", "s3cret-token")
    page.press("#token", "Enter")
    page.wait_for_selector(f'tr[data-run-id="{run_id}"]')
    page.goto(token_gateway.url + f"/ui/#/run/{run_id}")
    page.wait_for_selector("#footer .badge", timeout=30000)
    assert page.locator("#answer").inner_text() == "tokened answer"
    assert not [u for u in urls if "s3cret" in u]
    # A wrong token brings the prompt back, with nothing else shown.
    page.evaluate("sessionStorage.setItem('reactq.token', 'wrong')")
    page.reload()
    page.wait_for_selector("#login:not([hidden])")
    assert page.locator("#view").inner_html().strip() == ""


def test_phone_width_dark_and_keyboard(gateway, browser, llm: LLMFixture):
    """Usable at a phone's width (nothing wider than the screen), dark when the system is,
    and the run page reachable with the keyboard alone."""
    q = llm.script(llm.unique("phone"), [reply_tool_calls([("call-p1", "slow", {"tag": "phone", "seconds": 0.1})]),
                                         reply_text("ok")], synthesis=reply_text("small screen answer"))
    run_id = submit(gateway, q)
    wait_status(gateway, run_id)
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme="dark", is_mobile=True)
    page = ctx.new_page()
    try:
        page.goto(gateway.url + "/ui/#/runs")
        page.wait_for_selector(f'tr[data-run-id="{run_id}"]')
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        bg = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert sum(int(x) for x in bg[bg.index("(") + 1:-1].split(",")[:3]) < 150, bg  # dark
        shot(page, "runs-phone-dark")
        # Keyboard only: Tab to the run's link, Enter opens the run page.
        for _ in range(40):
            page.keyboard.press("Tab")
            if page.evaluate(f"document.activeElement.getAttribute('href') === '#/run/{run_id}'"):
                break
        else:
            raise AssertionError("the run's link is not reachable with Tab")
        page.keyboard.press("Enter")
        page.wait_for_selector("#footer .badge")
        assert page.locator("#answer").inner_text() == "small screen answer"
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        shot(page, "run-phone-dark")
    finally:
        ctx.close()
