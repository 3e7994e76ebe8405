"""docs/guides/evals.md run as written: its tool file loaded by real workers of their own, its
custom evaluator, the shell script (an eval, a changed prompt replaying the first, the
compare) and the Python client against ``reactq serve``; the scripted model answers the
baseline politely and the terse prompt tersely."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest

from reactq.shared.redisconn import free_port
from tests.integration.conftest import ROOT, LLMFixture, WorkerFactory, worker_env
from tests.scripted_server import first_user_text, reply_text, reply_tool_calls

pytestmark = pytest.mark.integration
DOC = ROOT / "docs" / "guides" / "evals.md"
FENCE = re.compile(r'^```(\w+)( title="([^"]+)")?\n(.*?)^```\s*$', re.M | re.S)
DB = 8

#: query → (refund call args or None, the baseline's answer, the terse prompt's answer)
ANSWERS = {
    "Order 1042 arrived broken, please refund the 20 EUR.":
        ({"order": "1042", "amount": 20}, "Sorry about that! I refunded 20 EUR for order 1042.",
         "Refund for order 1042 sent."),
    "When is your support desk open?": (None, "Sorry for the wait: we are open from 9 to 17.", "Open 9-17."),
    "Refund order 2211 (35 EUR), it never came.":
        ({"order": "2211", "amount": 35}, "Sorry it never came; I refunded order 2211.", "Order 2211 refunded."),
}


def blocks() -> tuple[dict[str, str], str]:
    titled, text = {}, ""
    for lang, _, title, code in FENCE.findall(DOC.read_text()):
        if title:
            titled[title] = code
        elif lang == "text":
            text = code
    return titled, text


def script(llm: LLMFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    for query, (args, polite, _) in ANSWERS.items():
        turns = ([reply_tool_calls([("r1", "refund", args)])] if args else []) + [reply_text("done")]
        llm.script(query, turns, synthesis=reply_text(polite))
    book = llm.server.handler

    def handler(request: dict[str, Any]) -> Any:
        terse = "one short sentence" in json.dumps(request.get("messages"))
        query = next((q for q in ANSWERS if q in first_user_text(request)), None)  # "Question: <query>…"
        if terse and request.get("stream") and query is not None:
            return reply_text(ANSWERS[query][2])
        return book(request)

    monkeypatch.setattr(llm.server, "handler", handler)


def test_the_evals_guide_runs_as_written(llm, backend, tmp_path, monkeypatch):
    titled, transcript = blocks()
    for name, code in titled.items():
        (tmp_path / name).write_text(code)
    script(llm, monkeypatch)
    url, extra = backend.isolated(DB)
    r = backend.client(url)
    if backend.kind != "cluster":
        r.flushdb()
    path = f"{tmp_path}{os.pathsep}{ROOT}"
    log = {"REFUNDS_LOG": str(tmp_path / "refunds.log")}  # the workers' directory is not this one
    env = worker_env(url, llm, **extra, **log, REACTQ_TOOLS="refunds:TOOLS", PYTHONPATH=path, COLUMNS="200")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    factory = WorkerFactory(url, llm, tmp_path, {**extra, **log, "REACTQ_TOOLS": "refunds:TOOLS",
                                                 "PYTHONPATH": path})
    factory.start("evals-doc", concurrency=4)
    gateway = None
    try:
        done = subprocess.run(["bash", "-e", "evals.sh"], cwd=tmp_path, env=env, text=True, capture_output=True,
                              timeout=240)
        assert done.returncode == 0, done.stdout + done.stderr
        # The terse eval replayed the baseline's refunds: nothing ran again.
        assert sorted((tmp_path / "refunds.log").read_text().splitlines()) == ["1042 20.0", "2211 35.0"]
        tail = done.stdout.strip().splitlines()[-len(transcript.strip().splitlines()):]
        assert tail == transcript.strip().splitlines(), done.stdout
        diff = json.loads((tmp_path / "compare.json").read_text())
        assert diff["broken"] == ["refund-1042", "hours", "refund-2211"] and diff["fixed"] == []
        terse = json.loads((tmp_path / "terse.json").read_text())
        assert terse["eval"]["scores"]["tool_calls"]["pass_rate"] == 1.0
        assert terse["eval"]["config"]["replay_from"] == json.loads((tmp_path / "baseline.json").read_text())[
            "eval"]["eval_id"]

        port = free_port()
        gateway = subprocess.Popen([str(Path(sys.executable).parent / "reactq"), "serve", "--port", str(port)],
                                   cwd=tmp_path, env=env, stdout=(tmp_path / "gateway.log").open("wb"),
                                   stderr=subprocess.STDOUT, start_new_session=True)
        env["REACTQ_GATEWAY"] = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx2.get(f"{env['REACTQ_GATEWAY']}/healthz", timeout=1).status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "gateway.log").read_text()
            time.sleep(0.2)
        py = subprocess.run([sys.executable, "from_python.py"], cwd=tmp_path, env=env, text=True,
                            capture_output=True, timeout=180)
        assert py.returncode == 0, py.stderr
        assert py.stdout.strip() == "1.0 []"
        assert sorted((tmp_path / "refunds.log").read_text().splitlines()) == ["1042 20.0", "2211 35.0"]
    finally:
        if gateway is not None:
            gateway.terminate()
            gateway.wait(10)
        factory.stop_all()
