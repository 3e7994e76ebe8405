"""The run index behind GET /v1/runs, against a real Redis-compatible server (no workers)."""

from __future__ import annotations

import time
import uuid

import pytest
import redis
from fastapi.testclient import TestClient

from reactq.shared.engine import ending, loop
from reactq.shared.engine.state import RunState
from reactq.shared.errors import RequestError
from reactq.shared.keys import Keys
from reactq.shared.stores.runs_index import RunFilter, RunsIndex
from reactq.shared.settings import Settings
from reactq.shared.stores.runs import RunStore

pytestmark = pytest.mark.integration


def _state(run_id: str) -> RunState:
    return loop.new_run(run_id=run_id, query="q", model="m", native=True, available_tools=[],
                        max_iterations=5, now=time.time())


@pytest.fixture
def keys() -> Keys:
    return Keys(f"t{uuid.uuid4().hex[:6]}:")


@pytest.fixture
def store(r: redis.Redis, keys: Keys) -> RunStore:
    return RunStore(r, keys=keys, ttl_seconds=60, maxlen=100)


def _ids(page: dict) -> list[str]:
    return [row["run_id"] for row in page["runs"]]


def test_newest_first_and_cursor_pages_cover_every_run_once(store, r, keys):
    made = [store.create(f"run{i}", {"query": f"question {i}", "model": "m"})[0] for i in range(7)]
    index = RunsIndex(r, keys)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = index.page(RunFilter(), limit=3, cursor=cursor)
        seen += _ids(page)
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(made))
    assert pages <= 4
    row = index.page(RunFilter(), limit=1)["runs"][0]
    assert set(row) >= {"run_id", "status", "model", "query", "iterations", "usage", "created_at", "updated_at"}
    assert row["status"] == "queued" and row["query"] == "question 6" and row["model"] == "m"


def test_runs_with_one_score_are_not_lost_between_pages(store, r, keys):
    """Ties in created_at: the cursor carries the id, so no run is skipped or repeated."""
    n = 60  # more ties than one read window holds
    for i in range(n):
        store.create(f"tie{i:02d}", {"query": "q"})
    r.zadd(keys.runs, {f"tie{i:02d}": 1000.0 for i in range(n)})
    index = RunsIndex(r, keys)
    seen: list[str] = []
    cursor = None
    for _ in range(n):
        page = index.page(RunFilter(), limit=2, cursor=cursor)
        seen += _ids(page)
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"tie{i:02d}" for i in reversed(range(n))]


def test_status_sets_follow_the_run_through_commit(store, r, keys):
    rid, _ = store.create("s1", {"query": "q"})
    other, _ = store.create("s2", {"query": "q"})
    index = RunsIndex(r, keys)
    st = _state(rid)
    assert store.commit(rid, st, 0, loop.begin_turn(st))
    assert _ids(index.page(RunFilter(status="running"))) == [rid]
    assert _ids(index.page(RunFilter(status="queued"))) == [other]
    events = ending.fail(st, "boom", now=time.time())
    assert store.commit(rid, st, 1, events)
    assert _ids(index.page(RunFilter(status="failed"))) == [rid]
    assert _ids(index.page(RunFilter(status="running"))) == []
    assert r.zscore(keys.runs_status("running"), rid) is None


def test_a_stale_status_set_never_shows_a_wrong_row(store, r, keys):
    """The hash is the truth: a set a crash left behind costs scanning, not a wrong answer."""
    rid, _ = store.create("st1", {"query": "q"})
    r.zadd(keys.runs_status("failed"), {rid: time.time()})
    assert _ids(RunsIndex(r, keys).page(RunFilter(status="failed"))) == []


def test_batch_and_thread_sets_and_combined_filters(store, r, keys):
    a, _ = store.create("b1", {"query": "q", "thread_id": "th-1"}, batch_id="B")
    b, _ = store.create("b2", {"query": "q"}, batch_id="B")
    c, _ = store.create("b3", {"query": "q", "thread_id": "th-1"})
    index = RunsIndex(r, keys)
    assert _ids(index.page(RunFilter(batch_id="B"))) == [b, a]
    assert _ids(index.page(RunFilter(thread_id="th-1"))) == [c, a]
    assert _ids(index.page(RunFilter(batch_id="B", thread_id="th-1"))) == [a]
    st = _state(b)
    store.commit(b, st, 0, loop.begin_turn(st))
    assert _ids(index.page(RunFilter(batch_id="B", status="queued"))) == [a]
    assert r.ttl(keys.runs_batch("B")) > 0


def test_the_index_expires_with_the_runs(store, r, keys):
    """A run whose hash expired disappears from the listing and from the set it was met in."""
    gone, _ = store.create("e1", {"query": "q"}, batch_id="E")
    kept, _ = store.create("e2", {"query": "q"}, batch_id="E")
    r.delete(keys.run(gone))
    index = RunsIndex(r, keys)
    assert _ids(index.page(RunFilter())) == [kept]
    assert r.zscore(keys.runs, gone) is None
    assert _ids(index.page(RunFilter(batch_id="E"))) == [kept]
    assert r.zscore(keys.runs_batch("E"), gone) is None


def test_the_listing_reads_no_more_than_it_needs_and_never_scans(store, r, keys, monkeypatch):
    for i in range(30):
        store.create(f"n{i}", {"query": "q" * 500})
    calls: list[str] = []
    real = r.execute_command

    def spy(*args, **kw):
        calls.append(str(args[0]).upper())
        return real(*args, **kw)

    monkeypatch.setattr(r, "execute_command", spy)
    page = RunsIndex(r, keys).page(RunFilter(), limit=5)
    assert len(page["runs"]) == 5 and len(page["runs"][0]["query"]) == 200
    assert "SCAN" not in calls and "KEYS" not in calls


def test_bad_cursor_is_a_request_error(r, keys):
    with pytest.raises(RequestError) as exc:
        RunsIndex(r, keys).page(RunFilter(), cursor="!!not-a-cursor")
    assert exc.value.field == "cursor"


def test_http_listing_and_its_422s(store, redis_url, keys):
    from reactq.dispatcher.http import create_app

    rid, _ = store.create("h1", {"query": "over http"})
    app = create_app(Settings(redis_url=redis_url, key_prefix=keys.prefix))
    with TestClient(app) as client:
        body = client.get("/v1/runs", params={"limit": 5}).json()
        assert _ids(body) == [rid] and body["next_cursor"] is None
        for params, field in (({"status": "nope"}, "status"), ({"limit": 0}, "limit"),
                              ({"cursor": "%%%"}, "cursor"), ({"batch_id": "a b"}, "batch_id")):
            res = client.get("/v1/runs", params=params)
            assert res.status_code == 422, params
            assert res.json()["error"]["field"] == field


def test_summary_of_one_run_has_the_whole_query(store, redis_url, keys):
    from reactq.dispatcher.http import create_app

    long_query = "x" * 500
    rid, _ = store.create("sum1", {"query": long_query, "model": "m"})
    app = create_app(Settings(redis_url=redis_url, key_prefix=keys.prefix))
    with TestClient(app) as client:
        row = client.get(f"/v1/runs/{rid}/summary").json()
        assert row["query"] == long_query and row["status"] == "queued"
        assert client.get("/v1/runs/nope/summary").status_code == 404


def test_an_http_batch_files_its_runs_under_its_id(redis_url, keys, r):
    """The batch driver submits with the batch id: GET /v1/runs?batch_id= lists its runs."""
    import threading

    from reactq.dispatcher.batch.driver import BatchDriver
    from reactq.dispatcher.batch.items import parse_obj
    from reactq.dispatcher.client import Dispatcher

    d = Dispatcher(Settings(redis_url=redis_url, key_prefix=keys.prefix))
    d.send = lambda *a, **k: None  # nothing enqueued: this test is about the index only
    stop = threading.Event()
    items = [parse_obj({"query": f"line {n}"}, n) for n in (1, 2, 3)]
    driver = BatchDriver(d, "http-batch:BX", 10, on_result=lambda res: None,
                         on_tick=lambda t: stop.set(), stop=stop, batch_id="BX")
    driver.run(items)
    page = RunsIndex(r, keys).page(RunFilter(batch_id="BX"))
    assert sorted(row["query"] for row in page["runs"]) == ["line 1", "line 2", "line 3"]
    assert all(row["batch_id"] == "BX" for row in page["runs"])
