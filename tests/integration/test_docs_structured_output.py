"""docs/structured-output.md, run as written: the Python example and the batch extraction
(``invoices.jsonl`` through ``reactq batch`` on real workers, the scripted model answering with
the documented values — its first answer for ``inv-1`` invalid, then repaired), and the
guardrail file ``policy.py`` through the engine."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reactq.shared.engine.output import problems
from tests.integration.conftest import ROOT, LLMFixture, worker_env
from tests.scripted_server import first_user_text, reply_text, reply_tool_calls

pytestmark = pytest.mark.integration
DOC = ROOT / "docs" / "structured-output.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)


def blocks() -> dict[str, str]:
    """Fenced blocks by their ``title="…"`` (and the first ``console`` block as ``console``)."""
    out: dict[str, str] = {}
    for m in FENCE.finditer(DOC.read_text()):
        title = re.search(r'title="([^"]+)"', m.group(2))
        key = title.group(1) if title else m.group(1)
        out.setdefault(key, m.group(3))
    return out


def script_typed(llm: LLMFixture, query: str, answers: list[dict[str, Any]]) -> None:
    llm.script(query, [reply_text("I read the invoice.")])
    llm.script(f"Question: {query}", [reply_tool_calls([("x", "final_answer", a)]) for a in answers])


def test_the_batch_extraction_example_runs_as_written(redis_url, llm, workers, tmp_path: Path):
    docs = blocks()
    (tmp_path / "invoices.jsonl").write_text(docs["invoices.jsonl"])
    lines = [json.loads(x) for x in docs["invoices.jsonl"].splitlines()]
    documented = {r["id"]: r for r in map(json.loads, docs["invoices.out.jsonl"].splitlines())}
    assert [line["id"] for line in lines] == list(documented)
    for line in lines:
        out = documented[line["id"]]["output"]
        assert problems(line["output_schema"], out) == []  # the documented values fit their schema
        first = [{**out, "total": "1,250.00"}] if line["id"] == "inv-1" else []
        script_typed(llm, line["query"], [*first, out])

    command = docs["console"].splitlines()[0].removeprefix("$ ").split()
    assert command[:2] == ["reactq", "batch"]
    res = subprocess.run([sys.executable, "-m", "dispatcher", *command[1:]], cwd=tmp_path,
                         env={**worker_env(redis_url, llm), "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=90)
    assert res.returncode == 0, res.stderr
    summary = re.sub(r"\d[\d,]* tokens", "N tokens", docs["console"].splitlines()[1])
    assert re.sub(r"\d[\d,]* tokens", "N tokens", res.stderr).rstrip().endswith(summary)
    results = [json.loads(x) for x in (tmp_path / "invoices.out.jsonl").read_text().splitlines()]
    assert {r["id"]: {"id": r["id"], "status": r["status"], "output": r["output"]} for r in results} == documented
    for r in results:
        assert json.loads(r["answer"]) == r["output"] and r["error"] is None
    repair = [b for b in (x.body for x in llm.server.requests)
              if first_user_text(b).startswith(f"Question: {lines[0]['query']}")][-1]
    assert "$.total: '1,250.00' is not of type 'number'" in repair["messages"][-1]["content"]


def test_the_python_example_runs_as_written(redis_url, llm, workers, monkeypatch):
    code = blocks()["typed_run.py"]
    query = re.search(r'query="([^"]+)"', code).group(1)
    value = json.loads(re.search(r'result\["output"\]\s+# (\{.*\})', code).group(1))
    script_typed(llm, query, [value])
    monkeypatch.setenv("REACTQ_REDIS_URL", redis_url)
    scope: dict[str, Any] = {}
    exec(compile(code, "typed_run.py", "exec"), scope)
    assert scope["result"]["output"] == value
    assert scope["result"]["answer"] == re.search(r"result\[\"answer\"\]\s+# '(.*)'", code).group(1)


async def test_the_policy_file_runs_through_the_engine(tmp_path: Path, monkeypatch):
    from reactq.shared.hooks.loader import load_hooks
    from reactq.shared.llm.testing import ScriptedLLM, text
    from tests.unit.engine_kit import run

    (tmp_path / "policy.py").write_text(blocks()["policy.py"])
    monkeypatch.syspath_prepend(str(tmp_path))
    hooks = load_hooks("policy:only_known_orgs,policy:no_internal_hosts")
    out = await run(ScriptedLLM([]), query="q", hooks=hooks, metadata={"org": "initech"}, status="failed")
    assert out.of("error", kind="guardrail")[0]["guardrail"] == "tenant_allowlist"
    llm = ScriptedLLM([text(json.dumps({"type": "final_answer", "answer": "x"})), text("see db1.corp.internal")])
    out = await run(llm, query="q", hooks=hooks, metadata={"org": "acme"})
    assert out.done["answer"] == "see db1.example"
