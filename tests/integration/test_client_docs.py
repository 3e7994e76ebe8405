"""docs/client.md's examples, run as written (each ``python run`` block as a script), against
a real gateway process (its URL put in place of the one the examples name), the session's
workers and the scripted LLM."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT, worker_env
from tests.integration.test_gateway import Gateway, start_gateway, stop_gateway
from tests.scripted_server import reply_text

pytestmark = pytest.mark.integration
DOC = ROOT / "docs" / "client.md"
FENCE = re.compile(r"^```python run\n(.*?)^```\s*$", re.M | re.S)
QUERY = "How many words are in 'the quick brown fox'?"
ANSWER = "There are 4 words."


@pytest.fixture(scope="module")
def gateway(redis_url, llm, workers, tmp_path_factory) -> Iterator[Gateway]:
    env = worker_env(redis_url, llm, REACTQ_API_TOKEN="my-token")
    gw = start_gateway(env, tmp_path_factory.mktemp("docs-gw") / "gateway.log")
    llm.script(QUERY, [reply_text("4")], synthesis=reply_text(ANSWER))
    yield gw
    llm.book.scripts.pop(QUERY, None)
    stop_gateway(gw)


def run_block(code: str, gateway: Gateway, redis_url: str, tmp: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REACTQ_", "OPENAI_"))}
    env.update({k: v for k, v in os.environ.items() if k in ("REACTQ_BROKER_URL", "REACTQ_REDIS_CLUSTER")})
    env["REACTQ_REDIS_URL"] = redis_url  # the Dispatcher's example: inside the cluster
    script = code.replace("http://127.0.0.1:8000", gateway.url)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"{code}\n--- stderr:\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_the_examples_of_docs_client_md_run_as_written(gateway, redis_url, tmp_path):
    blocks = FENCE.findall(DOC.read_text())
    assert len(blocks) == 4
    outputs = [run_block(code, gateway, redis_url, tmp_path) for code in blocks]
    sync, aio, errors, dispatcher = outputs
    lines = sync.splitlines()
    assert re.fullmatch(r"created [0-9a-f]{32} (queued|running|succeeded)", lines[0])  # a fast run may have ended
    assert lines[1] == ANSWER and lines[2] == f"succeeded - {ANSWER}"
    assert lines[3] == f"['{lines[0].split()[1]}']"  # the newest succeeded run is this one
    assert aio.strip() == f"async succeeded - {ANSWER}"
    assert errors.splitlines() == ["404 not_found", "422 max_iterations"]
    assert dispatcher.strip() == f"dispatcher succeeded - {ANSWER}"
