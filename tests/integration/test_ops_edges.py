"""Operational edges of a deployment: readiness without workers, a Redis Cluster node given
without the cluster setting, and the built-in connector rate limiter's settings."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest

from reactq.shared.redisconn import free_port, start_server
from tests.integration.conftest import ROOT, Backend, LLMFixture, WorkerFactory, worker_env
from tests.integration.test_gateway import start_gateway, stop_gateway
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = pytest.mark.integration


def test_readyz_is_ready_without_workers_and_reports_them(backend: Backend, llm: LLMFixture, tmp_path: Path) -> None:
    # Given a gateway whose broker no worker listens on (its own database).
    url, env = backend.isolated(15)
    gw = start_gateway(worker_env(url, llm, **env), tmp_path / "gw.log", via_cli=False)
    try:
        # When the probe asks, Then Redis and the broker make it ready, and no worker is reported.
        res = httpx2.get(f"{gw.url}/readyz", timeout=10)
        assert res.status_code == 200, res.text
        body = res.json()
        assert body["status"] == "ok" and body["redis"] == "ok" and body["broker"] == "ok"
        assert body["workers"] == []
        # And a run is still accepted (queued until a worker comes).
        assert httpx2.post(f"{gw.url}/v1/runs", json={"query": "queued"}, timeout=10).status_code == 202
    finally:
        stop_gateway(gw)


def _cluster_node(tmp_path: Path) -> tuple[str, subprocess.Popen[bytes]]:
    port = free_port()
    while port > 55_000:  # its cluster bus listens on port + 10000
        port = free_port()
    proc = start_server(port, tmp_path / "node", extra_args=(
        "--cluster-enabled", "yes", "--cluster-config-file", str(tmp_path / "node" / "nodes.conf")))
    return f"redis://127.0.0.1:{port}/0", proc


def _exits_naming_the_setting(cmd: list[str], env: dict[str, str], log: Path) -> str:
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        code = proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"it started on a cluster node:\n{log.read_text()[-2000:]}") from None
    text = log.read_text(errors="replace")
    assert code != 0 and "REACTQ_REDIS_CLUSTER" in text, text[-2000:]
    return text


def test_a_cluster_node_without_the_cluster_setting_is_refused_at_start(
        llm: LLMFixture, tmp_path: Path, backend: Backend) -> None:
    if backend.kind == "cluster":
        pytest.skip("the cluster tier sets REACTQ_REDIS_CLUSTER")
    url, node = _cluster_node(tmp_path)
    try:
        # The broker is a plain Redis (Celery's transport does not speak cluster).
        env = worker_env(url, llm, REACTQ_BROKER_URL=backend.isolated(14)[0])
        env.pop("REACTQ_REDIS_CLUSTER", None)
        _exits_naming_the_setting([sys.executable, "-m", "uvicorn", "reactq.dispatcher.http:app",
                                   "--host", "127.0.0.1", "--port", str(free_port())], env, tmp_path / "gw.log")
        _exits_naming_the_setting([sys.executable, "-m", "celery", "-A", "reactq.workers.app", "worker",
                                   "--pool", "threads", "-c", "1", "--without-mingle", "--without-gossip"],
                                  env, tmp_path / "worker.log")
    finally:
        node.kill()
        node.wait()


def _observations(r: Any, run_id: str) -> list[str]:
    import json

    from reactq.shared.keys import Keys

    out = []
    for _, f in r.xrange(Keys().run_events(run_id)):
        data = json.loads(f[b"data"])
        if data.get("type") == "iteration" and data.get("status") == "done":
            out.append(str(data.get("observation") or data.get("error") or ""))
    return out


@pytest.mark.parametrize("limit", ["2", "0"])
def test_the_connector_rate_limit_is_a_setting_and_0_turns_it_off(
        limit: str, backend: Backend, llm: LLMFixture, tmp_path: Path) -> None:
    from reactq.dispatcher.client import Dispatcher
    from reactq.shared.requests import RunRequest
    from reactq.shared.settings import Settings

    # Given a worker with REACTQ_CONNECTOR_RATE_LIMIT=<limit> and a connector tool.
    url, env = backend.isolated(13)
    factory = WorkerFactory(url, llm, tmp_path, env)
    factory.start("rl", concurrency=2, REACTQ_TOOLS="tests.integration.tools:CONNECTOR_TOOLS",
                  REACTQ_CONNECTOR_RATE_LIMIT=limit)
    try:
        q = llm.script(llm.unique("ping the connector three times"), [
            reply_tool_calls([(f"c{i}", "conn__ping", {"tag": str(i)})]) for i in range(3)
        ] + [reply_text("done pinging")], synthesis=reply_text("pinged"))
        d = Dispatcher(Settings(redis_url=url, model="scripted", tools="tests.integration.tools:CONNECTOR_TOOLS",
                                openai_api_key="test-key", openai_base_url=llm.server.base_url,
                                **backend.settings(env)))
        handle = d.submit(RunRequest(query=q, tools=["conn__ping"], completion_check=False))
        assert handle.result(timeout=60)["status"] == "succeeded"
        obs = _observations(d.redis, handle.run_id)
        # Then: calls past the limit are refused (2 a minute), or none is (0: off).
        limited = [o for o in obs if "Rate limit exceeded" in o]
        assert len(obs) == 3, obs
        assert len(limited) == (1 if limit == "2" else 0), obs
    finally:
        factory.stop_all()
        time.sleep(0)
