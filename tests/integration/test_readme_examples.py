"""The docs' tool, hook and MCP examples (docs/guides/tools.md, hooks.md), run as written.

Every fenced block whose info string has ``title="NAME"`` is written to ``NAME`` in a fresh
directory; every ``python run`` block is then run there as a script (PYTHONPATH = that
directory, ``python`` on PATH = this interpreter, no ``REACTQ_*``/``OPENAI_*`` settings).
Then the example tool and hook files are run together through the engine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reactq.shared.llm.testing import ScriptedLLM, final, tool_calls
from reactq.shared.tools import isolation
from tests.unit.engine_kit import run

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)
SECTIONS = ("## Write a tool", "## Write a hook", "## Use MCP servers")
PAGES = ("docs/guides/tools.md", "docs/guides/hooks.md")


def _blocks() -> list[tuple[str, str, str, str]]:
    """(section heading, language, info, code) of every fenced block of the pages."""
    out = []
    for page in PAGES:
        text = (ROOT / page).read_text()
        heads = [(m.start(), m.group(0)) for m in re.finditer(r"^#{2,3} .*$", text, re.M)]
        for m in FENCE.finditer(text):
            section = next((h for pos, h in reversed(heads) if pos < m.start()), "")
            out.append((section, m.group(1), m.group(2).strip(), m.group(3)))
    return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("readme")
    for _, _, info, code in _blocks():
        title = re.search(r'title="([^"]+)"', info)
        if title:
            (d / title.group(1)).write_text(code)
    return d


def _env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REACTQ_", "OPENAI_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(workdir)
    return env


def test_each_section_has_a_complete_example():
    blocks = _blocks()
    for section in SECTIONS:
        mine = [b for b in blocks if b[0] == section]
        assert any(b[2].startswith('title="') for b in mine), f"{section}: no file"
        assert any(b[1] == "python" and b[2] == "run" for b in mine), f"{section}: nothing runs"


@pytest.mark.parametrize("section", SECTIONS)
def test_the_run_blocks_run_as_written(workdir, section):
    blocks = [code for sec, lang, info, code in _blocks()
              if sec == section and lang == "python" and info == "run"]
    for code in blocks:
        proc = subprocess.run([sys.executable, "-c", code], cwd=workdir, env=_env(workdir),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{section}:\n{code}\n--- stderr:\n{proc.stderr[-3000:]}"


async def test_the_example_tools_and_hooks_work_together_in_a_run(workdir, monkeypatch, request):
    monkeypatch.syspath_prepend(str(workdir))
    monkeypatch.chdir(workdir)
    # A tool runs in a tool-runner child, which keeps the working directory it was started in:
    # idle children an earlier test of this process started would write invoices.log elsewhere.
    fresh = isolation.ToolProcessPool()
    monkeypatch.setattr(isolation, "_pool", fresh)
    monkeypatch.setattr(isolation, "_pool_pid", os.getpid())
    request.addfinalizer(fresh.close)
    (workdir / "invoices.log").unlink(missing_ok=True)
    from myhooks import HOOKS
    from mytools import TOOLS

    llm = ScriptedLLM([
        tool_calls(("big", "send_invoice", {"customer": "Bob", "amount": 5000}),
                   ("small", "send_invoice", {"customer": "Ann", "amount": 20, "currency": "EUR"}),
                   ("q", "stock_quote", {"symbol": "acme"})),
        final("Ann was invoiced; Bob's invoice needs approval."),
    ], repeat_last=True, abilities={"tool_call": True})
    out = await run(llm, TOOLS, hooks=HOOKS, metadata={"org": "acme-uk"}, completion_check=False)
    # The engine may rename call ids (they must be unique per run): match on the arguments.
    # A call a hook refused before it ran has no ``iteration start``: key each done by its own arguments.
    done = {d["tool_args"].get("customer", "quote"): d for d in out.of("step", type="iteration", status="done")}
    assert done["Bob"]["error"] == "Invoices over 1000 need approval (asked: 5000.0)"
    assert done["Ann"]["observation"] == "invoice sent to Ann: 20.00 GBP"
    assert done["quote"]["observation"] == "ACME: 123.45 EUR (delayed 15 min)"
    assert (workdir / "invoices.log").read_text() == "Ann 20.00 GBP\n"
