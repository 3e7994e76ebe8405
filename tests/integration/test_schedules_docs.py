"""docs/schedules.md, run as written: every ``bash run`` block in order (the real ``reactq``
CLI against this test's Redis, with workers and the scripted model answering the nightly
query), each ``text expect`` block's lines found in the output of the block before it, and
the ``nightly.json`` body accepted by ``POST /v1/schedules``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.integration.schedule_kit import Site, site
from tests.scripted_server import reply_text

pytestmark = pytest.mark.integration
__all__ = ["site"]
ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "schedules.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)
QUERY = "Summarise yesterday's support tickets in five bullet points"


def _blocks() -> list[tuple[str, str, str]]:
    return [(m.group(1), m.group(2).strip(), m.group(3)) for m in FENCE.finditer(DOC.read_text())]


def _squash(text: str) -> str:
    return " ".join(text.split())


def test_the_schedules_page_runs_as_written(site: Site, tmp_path: Path):
    site.llm.script(QUERY, [reply_text("- ticket volume was normal")], synthesis=reply_text("Five bullets."))
    site.workers("docs-w")
    env = site.process_env(COLUMNS="200")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    ran, last, watched = 0, "", ""
    for lang, info, code in _blocks():
        if lang == "bash" and info == "run":
            proc = subprocess.run(["bash", "-e", "-c", code], cwd=tmp_path, env=env, capture_output=True,
                                  text=True, timeout=120)
            assert proc.returncode == 0, f"{code}\n--- stderr:\n{proc.stderr[-3000:]}"
            last, ran = proc.stdout, ran + 1
            watched = last if "reactq watch" in code else watched
        elif lang == "text" and info == "expect":
            for line in filter(None, (ln.strip() for ln in code.splitlines())):
                assert _squash(line) in _squash(last), f"{line!r} not in:\n{last}"
    assert ran >= 5
    assert "Five bullets." in watched, "the triggered run answered"
    triggered = json.loads((tmp_path / "triggered.json").read_text())
    status = site.schedules.d.handle(triggered["run_id"]).status()
    assert status["status"] == "succeeded" and status["schedule_id"] == "nightly-tickets"
    assert site.store.get("nightly-tickets") is None, "the page ends by deleting it"


def test_the_http_example_body_is_accepted(site: Site):
    from reactq.dispatcher.http import create_app

    body = next(code for lang, info, code in _blocks() if lang == "json" and 'title="nightly.json"' in info)
    with TestClient(create_app(site.settings)) as client:
        resp = client.post("/v1/schedules", content=body, headers={"content-type": "application/json"})
        assert resp.status_code == 201, resp.text
        assert len(resp.json()["next_fire_times"]) == 5
        preview = client.get("/v1/schedules/nightly-tickets",
                             params={"from": "2027-03-26T12:00:00Z", "count": 3}).json()["next_fire_times"]
    assert preview == ["2027-03-27T01:00:00Z", "2027-03-28T01:00:00Z", "2027-03-29T00:00:00Z"]
