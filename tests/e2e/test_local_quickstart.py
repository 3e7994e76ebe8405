"""The README's quickstart against the real local model: the reader's ``quickstart.py`` as the
README writes it, a worker that loads its ``word_count`` through the README's ``REACTQ_TOOLS``,
and the script's own question, asked again and again.

Unlike the other tests of this tier, this one checks what the model said: the quickstart is
the first thing a reader runs, so its question must be answered right, with the reader's tool,
every time (``python -m bench.local_model --questions quickstart --runs 20`` measures how often).
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reactq.shared.requests import RunRequest
from reactq.shared.settings import Settings
from tests.e2e.conftest import local_worker

pytestmark = [pytest.mark.local_model, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)
TIMES = 5
#: 6 words: "6", "six", "6 words", "word count: 6", "the answer is 6." (not "16", "6 letters").
RIGHT = re.compile(r"(?i)^\W*(6|six)\W*$|\b(6|six)\s+words\b|\bwords?[\"']?\s*(count\s+)?(is|are|:|=)\s*(6|six)\b"
                   r"|\b(is|are|:|=)\s*(6|six)\W*$")


def _quickstart() -> tuple[str, str, dict[str, Any]]:
    """The README's quickstart.py, its REACTQ_TOOLS and the keywords of its RunRequest."""
    blocks = [(m.group(1), m.group(2).strip(), m.group(3)) for m in FENCE.finditer((ROOT / "README.md").read_text())]
    source = next(code for lang, info, code in blocks if lang == "python" and 'title="quickstart.py"' in info)
    shell = next(code for lang, info, code in blocks if lang == "bash" and info == "quickstart")
    tools = re.search(r"REACTQ_TOOLS=(\S+)", shell)
    assert tools is not None
    call = next(node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "RunRequest")
    return source, tools.group(1), {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}


SOURCE, TOOLS, REQUEST = _quickstart()


@pytest.fixture(scope="module")
def readers_worker(e2e_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`reactq worker &` with the README's ``export REACTQ_TOOLS=… PYTHONPATH=.``, in a directory
    holding the reader's quickstart.py. Yields the worker's log."""
    where = tmp_path_factory.mktemp("e2e-quickstart")
    (where / "quickstart.py").write_text(SOURCE)
    log = where / "worker.log"
    with local_worker(e2e_settings, log, name="e2e-quickstart@%h", cwd=where,
                      pythonpath=f"{where}{os.pathsep}{ROOT}", REACTQ_TOOLS=TOOLS):
        yield log


def test_the_readme_quickstart_is_answered_right_with_the_readers_tool_every_time(
        e2e_dispatcher: Any, readers_worker: Path) -> None:
    """Asked ``TIMES`` times, one after another (the local server answers one request at a
    time), each run calls the reader's ``word_count`` on the sentence, gets 6 back, and
    answers 6 — whichever worker takes the run (the tier's own worker, without the reader's
    tool, hands the call on to the reader's)."""
    request = RunRequest(**REQUEST)
    assert request.tools == ["word_count"]
    got = []
    for _ in range(TIMES):
        handle = e2e_dispatcher.submit(request)
        events = [e for _, e in handle.events(timeout=280)]
        result = handle.result(timeout=10)
        calls = [(e.data["tool_name"], e.data["tool_args"]) for e in events if e.channel == "step"
                 and e.data.get("type") == "iteration" and e.data.get("status") == "start"]
        observations = [e.data.get("observation") for e in events if e.channel == "step"
                        and e.data.get("type") == "iteration" and e.data.get("status") == "done"]
        got.append((result["status"], result.get("answer"), calls, observations))
    wrong = [g for g in got if not (g[0] == "succeeded" and RIGHT.search(str(g[1] or ""))
                                    and [name for name, _ in g[2]] == ["word_count"] and g[3] == ["6"])]
    assert not wrong, f"{len(wrong)} of {TIMES} not answered 6 with one word_count call: {wrong}"
