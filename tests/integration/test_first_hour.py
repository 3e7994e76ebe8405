"""A new user's first hour, as the pages say it, in a fresh process tree on one machine with
nothing configured: docs/getting-started.md's first run (which leaves a local worker running,
without the reader's tools), then the README's quickstart (a worker with the reader's tool,
and a script whose ``reactq.Dispatcher()`` has no REACTQ_REDIS_URL), run again and again.

Every run of the script must be answered with the tool the reader registered: whichever
worker a call reaches, ``word_count`` runs where ``quickstart:word_count`` was loaded.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import LLMFixture
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)
QUERY = "How many words are in 'to be or not to be'? Use the word_count tool."
ANSWER = "There are 6 words in it."
FIRST_RUN = "what is 17*23?"
AGAIN = 4


def _first_run_commands() -> list[str]:
    """The commands of getting-started's "A first run" (its console block), but the key."""
    text = (ROOT / "docs" / "getting-started.md").read_text()
    section = text.split("## A first run", 1)[1].split("\n## ", 1)[0]
    block = next(m.group(3) for m in FENCE.finditer(section) if m.group(1) == "console")
    commands = [line[2:] for line in block.splitlines() if line.startswith("$ ")]
    return [c for c in commands if not c.startswith("export OPENAI_API_KEY")]


def _quickstart() -> tuple[str, list[str]]:
    blocks = [(m.group(1), m.group(2).strip(), m.group(3)) for m in FENCE.finditer((ROOT / "README.md").read_text())]
    source = next(code for lang, info, code in blocks if lang == "python" and 'title="quickstart.py"' in info)
    first = next(code for lang, info, code in blocks if lang == "bash" and info == "quickstart")
    lines = [line for line in first.splitlines() if not line.startswith("export OPENAI_API_KEY")]
    return source, lines


def test_the_getting_started_run_then_the_readme_quickstart_answer_with_the_readers_tool(
        llm: LLMFixture, tmp_path: Path) -> None:
    llm.book.script(FIRST_RUN, [reply_tool_calls([("c1", "calculator", {"expression": "17*23"})]),
                                reply_text("391")], synthesis=reply_text("17*23 is 391."))
    llm.book.script(QUERY, [reply_tool_calls([("c1", "word_count", {"text": "to be or not to be"})]),
                            reply_text("6")], synthesis=reply_text(ANSWER))
    source, quickstart = _quickstart()
    (tmp_path / "quickstart.py").write_text(source)
    first_run = _first_run_commands()
    assert first_run == [f'reactq run "{FIRST_RUN}"'], first_run
    again = [f"echo '--- run {i}'; python quickstart.py" for i in range(AGAIN)]
    script = "\n".join(["set -e", *first_run, "echo '--- quickstart'", *quickstart, *again])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REACTQ_", "OPENAI_", "XDG_"))}
    env.update(OPENAI_BASE_URL=llm.server.base_url, OPENAI_API_KEY="test-key", REACTQ_MODEL="scripted",
               HOME=str(tmp_path), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    with (tmp_path / "out.txt").open("w") as stdout, (tmp_path / "err.txt").open("w") as stderr:
        proc = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, env=env, stdout=stdout,
                                stderr=stderr, start_new_session=True)
        try:
            proc.wait(timeout=240)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)  # the reader's `reactq worker &`
            down = subprocess.run(["reactq", "down"], cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=60)
            llm.book.scripts.pop(FIRST_RUN, None)  # a bare query would answer other tests' prompts
    out, err = (tmp_path / "out.txt").read_text(), (tmp_path / "err.txt").read_text()
    assert proc.returncode == 0, f"stdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
    assert "17*23 is 391." in out.split("--- quickstart")[0]
    runs = out.split("--- quickstart")[1].split("--- run ")
    assert len(runs) == AGAIN + 1
    for run in runs:
        assert "'tool_name': 'word_count'" in run and "'observation': '6'" in run, run[-2000:]
        assert "Unknown tool" not in run
        assert f"{ANSWER}\n" in run
    assert "stopped 1 local worker(s) and the embedded server" in down.stdout, down.stdout + down.stderr
