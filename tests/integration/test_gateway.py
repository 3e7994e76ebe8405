"""The HTTP + SSE gateway as a real uvicorn process, against the test Redis and the session
workers (issue 4: "the gateway runs as a real uvicorn process against real Redis and real
workers")."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import redis

from reactq.shared.keys import Keys
from reactq.shared.redisconn import free_port
from tests.integration.conftest import ROOT, worker_env
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = pytest.mark.integration
TOKEN = "s3cret-token"


@dataclass
class Gateway:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path


def start_gateway(env: dict[str, str], log: Path, *, via_cli: bool = True, port: int | None = None) -> Gateway:
    """``reactq serve`` (or plain ``uvicorn reactq.dispatcher.http:app``) on ``port`` (a free one)."""
    port = port or free_port()
    cmd = ([sys.executable, "-m", "dispatcher", "serve"] if via_cli else
           [sys.executable, "-m", "uvicorn", "reactq.dispatcher.http:app", "--host", "127.0.0.1"])
    proc = subprocess.Popen(
        [*cmd, "--port", str(port), "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
    gw = Gateway(f"http://127.0.0.1:{port}", proc, log)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gateway exited:\n{log.read_text()[-3000:]}")
        try:
            if httpx2.get(f"{gw.url}/healthz", timeout=2).status_code in (200, 503):
                return gw
            raise RuntimeError(f"gateway is broken:\n{log.read_text()[-3000:]}")
        except httpx2.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"gateway did not start:\n{log.read_text()[-3000:]}")


def stop_gateway(gw: Gateway) -> None:
    gw.proc.terminate()
    try:
        gw.proc.wait(10)
    except subprocess.TimeoutExpired:
        gw.proc.kill()
        gw.proc.wait()


@pytest.fixture(scope="module")
def gateway(redis_url, llm, workers, tmp_path_factory) -> Iterator[Gateway]:
    # A short keep-alive so a test can see the comment without waiting 15 s.
    env = worker_env(redis_url, llm, REACTQ_API_TOKEN=TOKEN, REACTQ_SSE_KEEPALIVE="0.4")
    gw = start_gateway(env, tmp_path_factory.mktemp("gateway") / "gateway.log")
    yield gw
    stop_gateway(gw)


@pytest.fixture
def api(gateway) -> Iterator[httpx2.Client]:
    with httpx2.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {TOKEN}"},
                      timeout=30) as client:
        yield client


# ----------------------------------------------------------------------------- SSE helpers


def read_sse(response: httpx2.Response, *, stop_after: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """Frames ``{id, event, data}`` and the number of keep-alive comments, until the server
    closes the stream (or ``stop_after`` frames were read)."""
    frames: list[dict[str, Any]] = []
    comments = 0
    cur: dict[str, str] = {}
    for line in response.iter_lines():
        if line == "":
            if cur:
                frames.append({"id": cur.get("id"), "event": cur.get("event"),
                               "data": json.loads(cur["data"])})
                cur = {}
                if stop_after is not None and len(frames) >= stop_after:
                    break
            continue
        if line.startswith(":"):
            comments += line.strip() == ": keepalive"
            continue
        key, _, value = line.partition(":")
        cur[key] = value[1:] if value.startswith(" ") else value
    return frames, comments


def stream_from_redis(r: redis.Redis, run_id: str) -> list[dict[str, Any]]:
    return [{"id": i.decode(), "event": f[b"event"].decode(), "data": json.loads(f[b"data"])}
            for i, f in r.xrange(Keys().run_events(run_id))]


def submit(api: httpx2.Client, body: dict[str, Any]) -> dict[str, Any]:
    res = api.post("/v1/runs", json=body)
    assert res.status_code == 202, res.text
    return res.json()


# ----------------------------------------------------------------------------- tests


@pytest.mark.core
def test_a_run_submitted_over_http_streams_its_events_as_sse_until_done(api, llm):
    q = llm.script(llm.unique("http: what is 17*23?"), [
        reply_tool_calls([("c1", "calculator", {"expression": "17*23"})]),
        reply_text("391"),
    ], synthesis=reply_text("The answer is 391."))
    created = submit(api, {"query": q})
    assert created["created"] is True
    assert created["events_url"] == f"/v1/runs/{created['run_id']}/events"
    with api.stream("GET", created["events_url"]) as res:
        assert res.status_code == 200
        assert res.headers["content-type"].startswith("text/event-stream")
        frames, _ = read_sse(res)
    assert [f["data"]["seq"] for f in frames] == list(range(1, len(frames) + 1))
    assert frames[0]["event"] == "step" and frames[0]["data"]["type"] == "thinking"
    assert frames[-1]["event"] == "done" and frames[-1]["data"]["status"] == "succeeded"
    tool_done = next(f for f in frames if f["data"].get("type") == "iteration" and f["data"]["status"] == "done")
    assert tool_done["data"]["observation"] == "391"
    status = api.get(created["status_url"]).json()
    assert status["status"] == "succeeded" and status["result"]["answer"] == "The answer is 391."


@pytest.mark.core
def test_watchers_of_several_runs_at_once_each_get_exactly_their_runs_stream(gateway, api, llm, r):
    """The gateway reads every watched stream through a few shared reads (on a Redis Cluster,
    one per run: a run's keys are in a slot of their own). Each watcher still gets exactly its
    run's stream, whether it was there from the start or came back with a ``Last-Event-ID``
    while the others of its run kept watching."""
    runs = []
    for n in range(3):
        q = llm.script(llm.unique(f"http: watched together {n}"), [reply_text("ok").with_options(delay=1.0)],
                       synthesis=reply_text(f"the answer number {n}", chunk_chars=4))
        runs.append(submit(api, {"query": q}))

    def client() -> httpx2.Client:
        return httpx2.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)

    def watch(url: str) -> list[dict[str, Any]]:
        with client() as c, c.stream("GET", url) as res:
            return read_sse(res)[0]

    def watch_twice(url: str) -> list[dict[str, Any]]:
        with client() as c:
            with c.stream("GET", url) as res:
                first, _ = read_sse(res, stop_after=1)
            with c.stream("GET", url, headers={"Last-Event-ID": first[-1]["id"]}) as res:
                return first + read_sse(res)[0]

    with ThreadPoolExecutor(9) as pool:
        futures = [(run, pool.submit(fn, run["events_url"])) for run in runs for fn in (watch, watch, watch_twice)]
        results = [(run, f.result(timeout=90)) for run, f in futures]
    for run, frames in results:
        assert frames[-1]["event"] == "done"
        assert frames == stream_from_redis(r, run["run_id"])


def test_a_reconnect_with_last_event_id_gets_exactly_the_missed_events(api, llm, r):
    """Drop the connection mid-run, reconnect with Last-Event-ID: the two reads concatenated
    are the run's whole stream, with no gap and no duplicate."""
    words = " ".join(f"w{i}" for i in range(40))
    q = llm.script(llm.unique("http: reconnect"), [reply_text("ok")],
                   synthesis=reply_text(words, chunk_delay=0.02, chunk_chars=6))
    created = submit(api, {"query": q})
    with api.stream("GET", created["events_url"]) as res:
        first, _ = read_sse(res, stop_after=5)
    assert len(first) == 5 and first[-1]["event"] != "done"
    time.sleep(0.3)  # events keep coming while nobody is connected
    with api.stream("GET", created["events_url"], headers={"Last-Event-ID": first[-1]["id"]}) as res:
        rest, _ = read_sse(res)
    assert rest[-1]["event"] == "done"
    full = stream_from_redis(r, created["run_id"])
    assert first + rest == full
    assert [f["data"]["seq"] for f in full] == list(range(1, len(full) + 1))
    answer = "".join(f["data"]["content"] for f in full if f["event"] == "answer" and f["data"]["status"] == "delta")
    assert answer == words

    # ?after= works the same; a cursor at `done` gets nothing and the response ends at once.
    with api.stream("GET", created["events_url"], params={"after": full[2]["id"]}) as res:
        assert read_sse(res)[0] == full[3:]
    started = time.monotonic()
    with api.stream("GET", created["events_url"], headers={"Last-Event-ID": full[-1]["id"]}) as res:
        assert read_sse(res)[0] == []
    assert time.monotonic() - started < 5.0  # closed at once, not after a keep-alive period or more
    assert api.get(created["events_url"], headers={"Last-Event-ID": "yesterday"}).status_code == 422


@pytest.mark.core
def test_interrupt_and_cancel_over_http_and_keepalive_comments(api, llm):
    q = llm.script(llm.unique("http: interrupt then cancel"), [
        reply_tool_calls([("c1", "slow", {"tag": "http-cancel", "seconds": 5})]),
        reply_text("never"),
    ])
    created = submit(api, {"query": q})
    run = created["status_url"]
    with api.stream("GET", created["events_url"]) as res:
        head, _ = read_sse(res, stop_after=3)  # thinking start/done, tool start
    assert head[-1]["data"]["type"] == "iteration"
    res = api.post(f"{run}/interrupts", json={"content": "use metric units"})
    assert res.status_code == 202 and len(res.json()["interrupt_id"]) == 12
    assert api.post(f"{run}/interrupts", json={"content": ""}).status_code == 422
    with api.stream("GET", created["events_url"], headers={"Last-Event-ID": head[-1]["id"]}) as res:
        time.sleep(0.6)  # the slow tool is running: the stream is quiet
        assert api.post(f"{run}/cancel").status_code == 202
        rest, keepalives = read_sse(res)
    assert keepalives >= 1
    assert rest[-1]["event"] == "done" and rest[-1]["data"]["status"] == "cancelled"
    assert api.get(run).json()["status"] == "cancelled"
    ended = api.post(f"{run}/interrupts", json={"content": "too late"})
    assert ended.status_code == 409 and "ended" in ended.json()["error"]["message"]
    again = api.post(f"{run}/cancel")  # acting on what ended: a 409, as everywhere
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"


def _fields(res: httpx2.Response) -> list[str]:
    err = res.json()["error"]
    assert err["code"] == "validation_error"
    return [str(d.get("field", "")).split(".")[-1] for d in err.get("details") or [err]]


def test_bad_input_is_refused_naming_the_problem_and_nothing_is_enqueued(api, r):
    before = r.zcard("reactq:runs")
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"query": 17}, "query", "string"),
        ({"query": "x", "max_iterations": "many"}, "max_iterations", "integer"),
        ({"query": "x", "tools": "calculator"}, "tools", "list"),
        ({"query": "x", "completion_check": "perhaps"}, "completion_check", "boolean"),
        ({}, "query", "required"),
        ({"model": "scripted"}, "query", "required"),
        ({"query": ""}, "query", "at least 1"),
        ({"query": "x", "tools": ["calculator", "rm_rf"]}, "tools", "rm_rf"),
        ({"query": "x", "model": "gpt-9"}, "model", "gpt-9"),
        ({"query": "x", "max_iterations": 0}, "max_iterations", "greater than or equal to 1"),
        ({"query": "x", "max_iterations": 201}, "max_iterations", "less than or equal to 200"),
        ({"query": "x", "mode": "fast"}, "mode", "auto"),
        ({"query": "x", "surprise": 1}, "surprise", "not permitted"),
    ]
    for body, field, words in cases:
        res = api.post("/v1/runs", json=body)
        assert res.status_code == 422, (body, res.text)
        assert field in _fields(res), (body, res.text)
        assert words in res.text, (body, res.text)
    not_json = api.post("/v1/runs", content=b"{query: x", headers={"content-type": "application/json"})
    assert not_json.status_code == 422 and "json" in not_json.text.lower()

    big = b'{"query": "' + b"x" * 10_000_000 + b'"}'
    res = api.post("/v1/runs", content=big, headers={"content-type": "application/json"})
    assert res.status_code == 413 and "1000000 bytes" in res.json()["error"]["message"]
    assert res.json()["error"]["code"] == "payload_too_large"

    def chunked() -> Iterator[bytes]:  # no Content-Length: the limit is counted while reading
        yield b'{"query": "'
        for _ in range(100):
            yield b"x" * 100_000
        yield b'"}'

    res = api.post("/v1/runs", content=chunked(), headers={"content-type": "application/json"})
    assert res.status_code == 413
    assert r.zcard("reactq:runs") == before, "a refused request must enqueue nothing"
    assert api.get("/healthz").status_code == 200  # and the gateway is fine afterwards


def test_unknown_ids_are_404(api):
    assert api.get("/v1/runs/nope").status_code == 404
    assert api.get("/v1/runs/nope/events").status_code == 404
    assert api.post("/v1/runs/nope/interrupts", json={"content": "hi"}).status_code == 404
    assert api.post("/v1/runs/nope/cancel").status_code == 404
    assert api.get("/v1/batches/nope").status_code == 404
    err = api.get("/v1/runs/nope").json()["error"]
    assert err["code"] == "not_found" and "no run" in err["message"]


def test_the_api_token_is_required_everywhere_but_healthz(gateway, api, llm):
    anon = httpx2.Client(base_url=gateway.url, timeout=10)
    wrong = httpx2.Client(base_url=gateway.url, timeout=10, headers={"Authorization": "Bearer nope"})
    for client in (anon, wrong):
        for method, path in [("POST", "/v1/runs"), ("GET", "/v1/runs/x"), ("GET", "/v1/runs/x/events"),
                             ("GET", "/metrics"), ("POST", "/v1/batches")]:
            res = client.request(method, path, json={"query": "x"})
            assert res.status_code == 401, (method, path)
            assert res.headers["www-authenticate"] == "Bearer"
            assert res.json()["error"]["code"] == "unauthorized"
        # The API's description and /docs hold no data: they load, and /docs takes the token.
        assert client.get("/openapi.json").status_code == 200
        assert client.get("/docs").status_code == 200
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code in (200, 503)  # probes need no token
    assert api.get("/openapi.json").status_code == 200


def test_healthz_openapi_and_metrics(api, gateway, workers, redis_url, llm, tmp_path):
    assert api.get("/healthz").json()["status"] == "ok"
    health = api.get("/readyz").json()
    assert health["redis"] == "ok" and health["broker"] == "ok" and health["status"] == "ok"
    assert {"alpha", "beta"} <= {w.split("@")[0] for w in health["workers"]}
    paths = api.get("/openapi.json").json()["paths"]
    for p in ("/v1/runs", "/v1/runs/{run_id}", "/v1/runs/{run_id}/events", "/v1/runs/{run_id}/interrupts",
              "/v1/runs/{run_id}/cancel", "/v1/batches", "/v1/batches/{batch_id}", "/healthz"):
        assert p in paths
    metrics = api.get("/metrics")
    assert metrics.status_code == 200 and "reactq_runs_started_total" in metrics.text
    for p in ("/v1/dags", "/v1/dags/{dag_id}", "/v1/dags/{dag_id}/events"):
        assert p in paths

    # Redis down ⇒ 503 (a second gateway pointed at a port nobody listens on).
    dead = worker_env(redis_url, llm, REACTQ_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    gw = start_gateway(dead, tmp_path / "dead.log", via_cli=False)
    try:
        res = httpx2.get(f"{gw.url}/readyz", timeout=10)
        assert res.status_code == 503 and res.json()["redis"].startswith("error")
        assert httpx2.get(f"{gw.url}/healthz", timeout=10).status_code == 200  # alive all the same
        res = httpx2.post(f"{gw.url}/v1/runs", json={"query": "x"}, timeout=10)
        assert res.status_code == 503 and "Redis is unreachable" in res.json()["error"]["message"]
        assert res.json()["error"]["code"] == "unavailable" and res.headers["retry-after"]
    finally:
        stop_gateway(gw)


def _wait_batch(api: httpx2.Client, batch_id: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        view = api.get(f"/v1/batches/{batch_id}", params={"results": "true"}).json()
        if view["status"] == "done":
            return view
        time.sleep(0.2)
    raise AssertionError(f"batch {batch_id} not done: {view}")


@pytest.mark.core
def test_http_batches_as_json_and_jsonl(api, llm):
    qs = [llm.script(llm.unique(f"http batch {i}"), [reply_text(f"a{i}")], synthesis=reply_text(f"answer {i}"))
          for i in range(4)]
    body = {"concurrency": 2, "requests": [
        {"id": "a", "query": qs[0]}, {"query": qs[1]}, {"id": "bad", "query": qs[2], "max_iterations": 0},
        "not an object", {"id": "d", "query": qs[3], "tools": ["calculator"]}]}
    res = api.post("/v1/batches", json=body)
    assert res.status_code == 202, res.text
    created = res.json()
    assert created["total"] == 5 and [x["line"] for x in created["invalid"]] == [3, 4]
    view = _wait_batch(api, created["batch_id"])
    assert (view["succeeded"], view["invalid"], view["failed"], view["queued"]) == (3, 2, 0, 0)
    by_line = {x["line"]: x for x in view["results"]}
    assert by_line[1]["id"] == "a" and by_line[1]["answer"] == "answer 0"
    assert by_line[2]["id"] == 2 and by_line[2]["status"] == "succeeded"
    assert by_line[3]["status"] == "invalid" and "line 3: max_iterations" in by_line[3]["error"]
    assert view["tokens"] > 0

    jsonl = "\n".join([json.dumps({"id": "x", "query": qs[0]}), "{oops", ""])
    res = api.post("/v1/batches", params={"concurrency": 1}, content=jsonl,
                   headers={"content-type": "application/x-ndjson"})
    assert res.status_code == 202
    view = _wait_batch(api, res.json()["batch_id"])
    assert [x["status"] for x in view["results"]] == ["succeeded", "invalid"]
    assert "line 2: not valid JSON" in view["results"][1]["error"]

    assert api.post("/v1/batches", json={"requests": []}).status_code == 422
    assert api.post("/v1/batches", json={"requests": [{"query": "x"}], "concurrency": 0}).status_code == 422


def test_a_gateway_that_starts_resumes_batches_left_running(api, redis_url, llm, r, tmp_path):
    """A batch whose gateway died (no driver lease) is picked up by the next gateway."""
    from reactq.dispatcher.batch.items import parse_obj
    from reactq.dispatcher.batch.store import BatchStore
    from reactq.shared.keys import Keys

    qs = [llm.script(llm.unique(f"orphan batch {i}"), [reply_text("a")]) for i in range(3)]
    batch_id = BatchStore(r, Keys(), 3600).create([parse_obj({"query": q}, n) for n, q in enumerate(qs, 1)], 2)
    gw = start_gateway(worker_env(redis_url, llm, REACTQ_API_TOKEN=TOKEN), tmp_path / "second.log")
    try:
        view = _wait_batch(api, batch_id)  # any gateway reports any batch
        assert view["succeeded"] == 3 and [x["line"] for x in view["results"]] == [1, 2, 3]
    finally:
        stop_gateway(gw)
