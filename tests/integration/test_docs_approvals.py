"""``docs/approvals.md`` run as written: its tool file loaded by real workers, its scripts
run in a fresh directory, deciding from the CLI, with curl against ``reactq serve``, and from
Python.

Every fenced block with ``title="NAME"`` is written to ``NAME``; the shell blocks run with
``bash``, ``python`` and ``reactq`` on PATH, the state Redis and the gateway in the
environment (``REACTQ_GATEWAY``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from reactq.shared.redisconn import free_port
from tests.integration.conftest import ROOT, LLMFixture, WorkerFactory, worker_env
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = pytest.mark.integration
DOC = ROOT / "docs" / "approvals.md"
FENCE = re.compile(r'^```\w+ title="([^"]+)"\n(.*?)^```\s*$', re.M | re.S)
QUERY = "Pay invoice 42: 120 to ACME."


@pytest.fixture(scope="module")
def docs_env(redis_url: str, llm: LLMFixture, backend: Any,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    work = tmp_path_factory.mktemp("approvals-doc")
    for name, code in FENCE.findall(DOC.read_text()):
        (work / name).write_text(code)
    url, extra = backend.isolated(12)
    r = backend.client(url)
    if backend.kind != "cluster":
        r.flushdb()
    llm.script(QUERY, [reply_tool_calls([("p1", "transfer", {"invoice": "42", "amount": 120})]),
                       reply_text("Invoice 42 is handled.")], synthesis=reply_text("Invoice 42 is handled."))
    env = worker_env(url, llm, **extra, REACTQ_TOOLS="payments:TOOLS", PYTHONPATH=f"{work}{os.pathsep}{ROOT}",
                     COLUMNS="200")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    factory = WorkerFactory(url, llm, work, {**extra, "REACTQ_TOOLS": "payments:TOOLS",
                                             "PYTHONPATH": f"{work}{os.pathsep}{ROOT}"})
    factory.start("docs-a")
    port = free_port()
    gateway = subprocess.Popen([str(Path(sys.executable).parent / "reactq"), "serve", "--port", str(port)],
                               cwd=work, env=env, stdout=(work / "gateway.log").open("wb"),
                               stderr=subprocess.STDOUT, start_new_session=True)
    env["REACTQ_GATEWAY"] = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx2.get(f"{env['REACTQ_GATEWAY']}/healthz", timeout=1).status_code == 200:
                break
        except httpx2.HTTPError:
            time.sleep(0.2)
    yield work, env
    gateway.terminate()
    gateway.wait(10)
    factory.stop_all()


def _run(work: Path, env: dict[str, str], *cmd: str) -> str:
    done = subprocess.run(list(cmd), cwd=work, env=env, text=True, capture_output=True, timeout=120)
    assert done.returncode == 0, f"{cmd}: {done.stdout}\n{done.stderr}"
    return done.stdout


def _last_run(env: dict[str, str]) -> dict[str, Any]:
    runs = httpx2.get(f"{env['REACTQ_GATEWAY']}/v1/runs", params={"limit": 1}).json()["runs"]
    run_id = runs[0]["run_id"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        st = httpx2.get(f"{env['REACTQ_GATEWAY']}/v1/runs/{run_id}").json()
        if st["status"] in ("succeeded", "failed", "cancelled"):
            return dict(st)
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not end")


def _observation(env: dict[str, str], run_id: str) -> str:
    with httpx2.stream("GET", f"{env['REACTQ_GATEWAY']}/v1/runs/{run_id}/events", timeout=30) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: "):
                data = json.loads(line[6:])
                if data.get("type") == "iteration" and data.get("status") == "done":
                    return str(data.get("observation"))
    raise AssertionError("no iteration done")


def test_the_doc_names_every_file_it_runs() -> None:
    names = [name for name, _ in FENCE.findall(DOC.read_text())]
    assert names == ["payments.py", "submit.py", "decide_cli.sh", "decide_curl.sh", "decide.py"]


def test_deciding_from_the_cli_approves_and_the_call_runs(docs_env: tuple[Path, dict[str, str]]) -> None:
    work, env = docs_env
    printed = _run(work, env, "bash", "decide_cli.sh")
    assert "transfer" in printed and "approved" in printed
    st = _last_run(env)
    assert st["status"] == "succeeded"
    assert _observation(env, st["run_id"]) == "paid 120 for invoice 42"


def test_deciding_with_curl_rejects(docs_env: tuple[Path, dict[str, str]]) -> None:
    work, env = docs_env
    printed = _run(work, env, "bash", "decide_curl.sh")
    assert '"status":"rejected"' in printed.replace(" ", "")
    st = _last_run(env)
    assert st["status"] == "succeeded"
    assert "did not approve" in _observation(env, st["run_id"])


def test_deciding_from_python_edits(docs_env: tuple[Path, dict[str, str]]) -> None:
    work, env = docs_env
    printed = _run(work, env, "python", "decide.py")
    assert printed.splitlines() == ["transfer {'invoice': '42', 'amount': 120}", "succeeded"]
    st = _last_run(env)
    assert _observation(env, st["run_id"]) == "paid 100 for invoice 42"
