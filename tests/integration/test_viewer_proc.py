"""`reactq serve` prints the viewer's URL; `make demo` (python -m reactq.dispatcher.local.demo)
prints it and keeps the gateway up beside its workers while the batch runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
import redis

from reactq.dispatcher.local.viewer import viewer_url
from reactq.shared.redisconn import free_port
from tests.integration.conftest import ROOT, LLMFixture, worker_env
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = pytest.mark.integration


def test_viewer_url_is_what_a_local_browser_opens():
    assert viewer_url("0.0.0.0", 8000) == "http://127.0.0.1:8000/ui/"
    assert viewer_url("10.0.0.5", 9000) == "http://10.0.0.5:9000/ui/"
    assert viewer_url("::1", 80) == "http://[::1]:80/ui/"


def test_reactq_serve_prints_the_viewer_url_and_serves_it(redis_url: str, llm: LLMFixture, tmp_path: Path):
    port = free_port()
    env = worker_env(redis_url, llm)
    proc = subprocess.Popen([sys.executable, "-m", "reactq.dispatcher", "serve", "--port", str(port),
                             "--log-level", "warning"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        line = proc.stderr.readline().decode()
        assert line.strip() == f"Viewer: http://127.0.0.1:{port}/ui/"
        deadline = time.monotonic() + 20
        while True:
            try:
                res = httpx2.get(f"http://127.0.0.1:{port}/ui/", timeout=1)
                break
            except httpx2.HTTPError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert res.status_code == 200 and "reactq viewer" in res.text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)


def test_the_demo_prints_the_viewer_and_keeps_the_gateway_up_while_the_batch_runs(
        redis_url: str, llm: LLMFixture, tmp_path: Path):
    url = redis_url.rsplit("/", 1)[0] + "/15"
    redis.Redis.from_url(url).flushdb()
    q = llm.unique("demo question")
    llm.script(q, [reply_tool_calls([("call-d1", "slow", {"tag": "demo", "seconds": 3.0})]),
                   reply_text("done")], synthesis=reply_text("demo answer"))
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "one", "query": q}) + "\n")
    env = worker_env(url, llm, REACTQ_DATA_DIR=str(tmp_path / "data"))
    proc = subprocess.Popen([sys.executable, "-m", "reactq.dispatcher.local.demo", "--questions", str(questions),
                             "--output", str(tmp_path / "out.jsonl"), "--workers", "1", "--no-flower"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    lines: list[str] = []
    viewer = None
    seen_running = False
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode().rstrip()
            lines.append(line)
            if line.startswith("Viewer: ") and viewer is None:
                viewer = line.split()[1]
            if viewer and "submitted" in line and not seen_running:
                # While the batch runs, the viewer answers and lists the run.
                base = viewer.removesuffix("/ui/")
                runs = httpx2.get(base + "/v1/runs", timeout=5).json()["runs"]
                seen_running = any(r["query"] == q and r["status"] in ("queued", "running") for r in runs)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    out = "\n".join(lines)
    assert proc.returncode == 0, out
    assert viewer and viewer.endswith("/ui/"), out
    assert seen_running, out
    assert out.count("Viewer: ") == 2  # at the start, and again with the results
    with pytest.raises(httpx2.HTTPError):  # the demo stopped its gateway with its workers
        httpx2.get(viewer, timeout=2)
