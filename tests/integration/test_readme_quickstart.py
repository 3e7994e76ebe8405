"""The README's quickstart, pasted as written: the Python file, a worker, the script, the CLI
and curl + SSE against the gateway.

The blocks tagged ``quickstart`` run in order as one bash script in a fresh directory holding
``quickstart.py`` (the block titled so). The first ``export`` line stands for the user's own
Redis and model: the test's environment gives them instead (a Redis-compatible server and the
scripted OpenAI-compatible server, started by the fixtures); the gateway's port is a free one.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from reactq.shared.redisconn import free_port, start_server
from tests.integration.conftest import LLMFixture
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)
QUERIES = ("How many words are in 'to be or not to be'? Use the word_count tool.",
           'How many words are in "to be or not to be"? Use the word_count tool.')
ANSWER = "There are 6 words in it."


def _blocks() -> list[tuple[str, str, str]]:
    text = (ROOT / "README.md").read_text()
    return [(m.group(1), m.group(2).strip(), m.group(3)) for m in FENCE.finditer(text)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[str]:
    """A Redis of the quickstart's own: as on a user's machine, no other worker consumes its
    queues and no other tool catalog is published in it."""
    port = free_port()
    proc = start_server(port, tmp_path / "redis")
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.kill()
        proc.wait()


def test_the_quickstart_runs_as_written(own_redis: str, llm: LLMFixture, tmp_path: Path) -> None:
    # Given: the scripted model answers the quickstart's question with one word_count call.
    for query in QUERIES:
        llm.book.script(query, [reply_tool_calls([("c1", "word_count", {"text": "to be or not to be"})]),
                                reply_text("6")], synthesis=reply_text(ANSWER))
    blocks = _blocks()
    source = next(code for lang, info, code in blocks if lang == "python" and 'title="quickstart.py"' in info)
    (tmp_path / "quickstart.py").write_text(source)
    script = "\n".join(code for lang, info, code in blocks if lang == "bash" and info == "quickstart")
    lines = script.splitlines()
    first_export = next(i for i, line in enumerate(lines) if line.startswith("export "))
    assert "OPENAI_API_KEY" in lines[first_export]
    del lines[first_export]  # the user's key: the test's environment gives it (and a Redis of its own)
    port = str(_free_port())
    script = "set -e\n" + "\n".join(lines).replace("8000", port)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REACTQ_", "OPENAI_"))}
    env.update(REACTQ_REDIS_URL=own_redis, OPENAI_BASE_URL=llm.server.base_url, OPENAI_API_KEY="test-key",
               REACTQ_MODEL="scripted", HOME=str(tmp_path),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    # When: it runs as one shell session (the worker and the gateway in the background).
    # Output to files, not pipes: the background processes keep their ends open.
    with (tmp_path / "out.txt").open("w") as stdout, (tmp_path / "err.txt").open("w") as stderr:
        proc = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, env=env, stdout=stdout,
                                stderr=stderr, start_new_session=True)
        try:
            proc.wait(timeout=180)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)  # the worker and the gateway it left running
    out, err = (tmp_path / "out.txt").read_text(), (tmp_path / "err.txt").read_text()
    # Then: the script, the CLI and the SSE stream each show the run's events and its answer.
    assert proc.returncode == 0, f"stdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
    assert out.count(ANSWER) >= 2, out[-3000:]  # the Python script's last line; the CLI's answer
    assert "step {'type': 'iteration'" in out and "'tool_name': 'word_count'" in out
    assert "event: done" in out and '"status":"succeeded"' in out
    assert "There are 6" in out.split("event: done")[0]  # SSE: the answer's deltas came first
