"""Schedules through their doors (HTTP, CLI) and a real ``reactq scheduler``: validation at
the door, previews, overlap skip / cancel_previous, pause and resume, trigger, and the runs
a schedule started listed by ``GET /v1/runs?schedule_id=``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from reactq.shared.schedule.models import ScheduleRequest
from reactq.shared.schedule.times import parse_instant
from tests.integration.conftest import ROOT
from tests.integration.schedule_kit import Site, site, wait_for
from tests.scripted_server import reply_text

pytestmark = pytest.mark.integration
__all__ = ["site"]


@pytest.fixture
def http(site: Site) -> Iterator[TestClient]:
    from reactq.dispatcher.http import create_app

    with TestClient(create_app(site.settings)) as client:
        yield client


def _loc(resp: Any) -> list[str]:
    assert resp.status_code == 422, resp.text
    return [".".join(str(p) for p in (d.get("location"), d.get("field")) if p)
            for d in resp.json()["error"]["details"]]


def test_bad_schedules_are_refused_at_the_door_naming_the_field(http: TestClient):
    run = {"query": "q"}
    cases = [({"cron": "61 * * * *", "run": run}, "body.cron"),
             ({"cron": "0 0 30 2 *", "run": run}, "body.cron"),
             ({"cron": "0 2 * * *", "timezone": "Europe/Nowhere", "run": run}, "body.timezone"),
             ({"cron": "0 2 * * *", "interval_s": 60, "run": run}, "body.interval_s"),
             ({"run": run}, "body.interval_s"),
             ({"interval_s": 0, "run": run}, "body.interval_s"),
             ({"interval_s": 60, "run": {"query": "q", "idempotency_key": "k"}}, "body.run.idempotency_key"),
             ({"interval_s": 60, "run": {"query": "q", "model": "no-such-model"}}, "body.run.model"),
             ({"interval_s": 60, "run": run, "overlap": "never"}, "body.overlap")]
    for body, field in cases:
        resp = http.post("/v1/schedules", json=body)
        assert field in _loc(resp), (body, resp.json())
    both = http.post("/v1/schedules", json={"cron": "0 2 * * *", "interval_s": 60, "run": run}).json()
    assert "cron" in both["error"]["message"] and "interval_s" in both["error"]["message"]
    assert http.get("/v1/schedules").json()["schedules"] == [], "nothing was stored"


def test_create_read_preview_change_and_delete_over_http(http: TestClient):
    body = {"schedule_id": "nightly", "cron": "30 2 * * *", "timezone": "Europe/Berlin", "run": {"query": "q"}}
    created = http.post("/v1/schedules", json=body)
    assert created.status_code == 201, created.text
    view = created.json()
    assert view["schedule_id"] == "nightly" and len(view["next_fire_times"]) == 5
    assert view["skipped"] == 0 and view["last_run_id"] is None and view["last_fired_at"] is None
    assert http.post("/v1/schedules", json=body).status_code == 409
    # The spring-forward night: 02:30 does not exist, the tick is the first instant after the gap.
    preview = http.get("/v1/schedules/nightly", params={"from": "2027-03-27T00:00:00Z", "count": 3}).json()
    assert preview["next_fire_times"] == ["2027-03-27T01:30:00Z", "2027-03-28T01:00:00Z", "2027-03-29T00:30:00Z"]
    assert "count" in _loc(http.get("/v1/schedules/nightly", params={"count": 101}))[0]
    assert "query.from" in _loc(http.get("/v1/schedules/nightly", params={"from": "yesterday"}))
    # A change of cadence is checked as a whole and moves the next tick.
    assert "interval_s" in _loc(http.patch("/v1/schedules/nightly", json={"interval_s": 60}))[0]
    patched = http.patch("/v1/schedules/nightly", json={"cron": None, "interval_s": 3600, "overlap": "allow"}).json()
    assert patched["interval_s"] == 3600 and patched["cron"] is None and patched["overlap"] == "allow"
    assert parse_instant(patched["next_fire_times"][0]) % 3600 == 0
    paused = http.patch("/v1/schedules/nightly", json={"paused": True}).json()
    assert paused["paused"] is True and paused["next_tick"] is None
    assert [s["schedule_id"] for s in http.get("/v1/schedules").json()["schedules"]] == ["nightly"]
    assert http.delete("/v1/schedules/nightly").status_code == 204
    for resp in (http.get("/v1/schedules/nightly"), http.delete("/v1/schedules/nightly"),
                 http.post("/v1/schedules/nightly/trigger"), http.patch("/v1/schedules/nightly", json={})):
        assert resp.status_code == 404, resp.text


def test_trigger_starts_a_run_filed_under_the_schedule(http: TestClient):
    http.post("/v1/schedules", json={"schedule_id": "by-hand", "interval_s": 86400, "run": {"query": "now"}})
    resp = http.post("/v1/schedules/by-hand/trigger")
    assert resp.status_code == 202, resp.text
    run_id = resp.json()["run_id"]
    view = http.get("/v1/schedules/by-hand").json()
    assert view["last_run_id"] == run_id and view["last_fired_at"] is not None
    run = http.get(f"/v1/runs/{run_id}").json()
    assert run["schedule_id"] == "by-hand" and run["scheduled_for"] is None
    rows = http.get("/v1/runs", params={"schedule_id": "by-hand"}).json()["runs"]
    assert [(r["run_id"], r["schedule_id"], r["scheduled_for"]) for r in rows] == [(run_id, "by-hand", None)]
    assert http.get("/v1/runs", params={"schedule_id": "other"}).json()["runs"] == []


def test_overlap_skip_counts_the_ticks_that_found_the_last_run_active(site: Site):
    # No workers: the first run stays queued (active), so every later tick is skipped.
    site.scheduler("only")
    site.schedules.create(ScheduleRequest.model_validate(
        {"schedule_id": "skipper", "interval_s": 1, "overlap": "skip", "run": {"query": "slow"}}))
    wait_for(lambda: site.store.get("skipper").skipped >= 3, 20, "3 skipped ticks")  # type: ignore[union-attr]
    rec = site.store.get("skipper")
    assert rec is not None and rec.fired == 1
    ticks = site.ticks("skipper")
    assert len(ticks) == 1 and list(ticks.values()) == [1]
    http_rows = site.r.zcard(site.keys.runs_schedule("skipper"))
    assert http_rows == 1


def test_overlap_cancel_previous_cancels_the_active_run_before_the_next_one(site: Site):
    q = site.llm.script(site.llm.unique("a slow nightly job"), [reply_text("still thinking", delay=6.0)],
                        synthesis=reply_text("done"))
    site.workers("cancel-w")
    site.scheduler("only")
    site.schedules.create(ScheduleRequest.model_validate(
        {"schedule_id": "canceller", "interval_s": 2, "overlap": "cancel_previous", "run": {"query": q}}))
    ids = wait_for(lambda: (ids := site.run_ids("canceller")) and len(ids) >= 2 and ids, 20, "two runs")
    d = site.schedules.d
    first = min(ids, key=lambda rid: float(site.r.hget(site.keys.run(rid), "created_at") or 0))
    assert d.handle(first).result(timeout=20)["status"] == "cancelled"
    rec = site.store.get("canceller")
    assert rec is not None and rec.skipped == 0
    # No more ticks, and no run left thinking for the worker's shutdown to wait out.
    site.schedules.delete("canceller")
    for rid in site.run_ids("canceller"):
        d.handle(rid).cancel()


def test_pause_stops_ticks_and_resume_does_not_catch_them_up(site: Site):
    site.scheduler("only")
    svc = site.schedules
    svc.create(ScheduleRequest.model_validate(
        {"schedule_id": "pausable", "interval_s": 1, "overlap": "allow", "run": {"query": "tick"}}))
    wait_for(lambda: len(site.run_ids("pausable")) >= 2, 20, "two runs")
    svc.set_paused("pausable", True)
    paused_at = time.time()
    time.sleep(0.5)  # a tick being fired at that very moment lands
    before = set(site.ticks("pausable"))
    time.sleep(3)
    assert set(site.ticks("pausable")) == before, "no tick fires while paused"
    resumed = svc.set_paused("pausable", False)
    resumed_at = time.time()
    assert parse_instant(resumed["next_tick"]) > resumed_at - 1
    wait_for(lambda: len(site.ticks("pausable")) >= len(before) + 2, 20, "ticks after resume")
    new = set(site.ticks("pausable")) - before
    assert all(parse_instant(t) > paused_at + 1 for t in new)
    assert all(parse_instant(t) >= resumed_at - 1 for t in new), "the paused ticks were not caught up"
    assert site.store.get("pausable").skipped == 0  # type: ignore[union-attr]


def _cli(site: Site, *args: str) -> subprocess.CompletedProcess[str]:
    """``reactq schedules …`` as a real process."""
    return subprocess.run([sys.executable, "-m", "reactq.dispatcher", "schedules", *args], cwd=ROOT,
                          env=site.process_env(), capture_output=True, text=True, timeout=60)


def _cli_in_process(site: Site, *args: str) -> subprocess.CompletedProcess[str]:
    """The same command in this process (each process start costs seconds of imports)."""
    from typer.testing import CliRunner

    from reactq.dispatcher.cli import app

    result = CliRunner().invoke(app, ["schedules", *args], env=site.process_env())
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def test_the_cli_manages_schedules_straight_through_redis(site: Site):
    bad = _cli(site, "create", "--cron", "0 25 * * *", "q")
    assert bad.returncode == 2 and "cron" in bad.stderr
    cli = _cli_in_process  # the process is shown by the first and the last command
    neither = cli(site, "create", "q")
    assert neither.returncode == 2 and "interval_s" in neither.stderr
    made = cli(site, "create", "--cron", "0 2 * * *", "--timezone", "America/New_York", "--id", "cli-nightly",
               "--overlap", "cancel_previous", "--json", "summarise the tickets")
    assert made.returncode == 0, made.stderr
    view = json.loads(made.stdout)
    assert view["schedule_id"] == "cli-nightly" and view["overlap"] == "cancel_previous"
    shown = json.loads(cli(site, "show", "cli-nightly", "--from", "2027-11-06T00:00:00Z", "--count", "2",
                           "--json").stdout)
    assert shown["next_fire_times"] == ["2027-11-06T06:00:00Z", "2027-11-07T07:00:00Z"]
    listed = json.loads(cli(site, "list", "--json").stdout)
    assert [s["schedule_id"] for s in listed["schedules"]] == ["cli-nightly"]
    assert json.loads(cli(site, "pause", "cli-nightly", "--json").stdout)["paused"] is True
    assert json.loads(cli(site, "resume", "cli-nightly", "--json").stdout)["paused"] is False
    run_id = json.loads(cli(site, "trigger", "cli-nightly", "--json").stdout)["run_id"]
    assert site.r.hget(site.keys.run(run_id), "schedule_id") == b"cli-nightly"
    assert json.loads(cli(site, "delete", "cli-nightly", "--json").stdout)["deleted"] is True
    gone = _cli(site, "show", "cli-nightly")
    assert gone.returncode == 2 and "no schedule" in gone.stderr


def test_the_listing_pages_oldest_first(http: TestClient):
    for n in range(5):
        assert http.post("/v1/schedules", json={"schedule_id": f"p{n}", "interval_s": 60,
                                                "run": {"query": "q"}}).status_code == 201
    seen, cursor = [], None
    while True:
        page = http.get("/v1/schedules", params={"limit": 2, **({"cursor": cursor} if cursor else {})}).json()
        seen += [s["schedule_id"] for s in page["schedules"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ["p0", "p1", "p2", "p3", "p4"]
    assert "query.cursor" in _loc(http.get("/v1/schedules", params={"cursor": "not-a-cursor"}))
    assert "limit" in _loc(http.get("/v1/schedules", params={"limit": 0}))[0]


def test_the_python_client_speaks_to_the_schedule_routes(http: TestClient):
    import reactq

    client = reactq.Client("http://testserver", http_client=http)
    made = client.schedules.create(schedule_id="py", cron="30 2 * * *", timezone="America/New_York",
                                   run={"query": "q"})
    assert made.schedule_id == "py" and len(made.next_fire_times) == 5
    preview = client.schedules.get("py", from_="2027-03-13T00:00:00Z", count=2)
    assert preview.next_fire_times == ["2027-03-13T07:30:00Z", "2027-03-14T07:00:00Z"]
    assert [s.schedule_id for s in client.schedules.list().schedules] == ["py"]
    assert client.schedules.update("py", paused=True).model_dump()["paused"] is True
    run = client.schedules.trigger("py")
    assert client.runs.get(run.run_id).model_dump()["schedule_id"] == "py"
    client.schedules.delete("py")
    with pytest.raises(reactq.NotFound):
        client.schedules.get("py")
