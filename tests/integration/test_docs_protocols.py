"""``docs/responses.md`` and ``docs/mcp-server.md`` run as written: every ``python title="…"``
example against a real gateway (``reactq serve`` with API keys) and a worker whose registry
names the scripted model ``general``, its output compared with the ``text`` block after it;
the MCP client configuration's stdio entry started as written (``reactq mcp`` from PATH)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters

from tests.integration.conftest import ROOT, LLMFixture, WorkerFactory, worker_env
from tests.integration.test_gateway import start_gateway, stop_gateway
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = [pytest.mark.integration, pytest.mark.mcp]
PAGES = [ROOT / "docs" / "responses.md", ROOT / "docs" / "mcp-server.md"]
FENCE = re.compile(r'^```(\w+)(?: title="([^"]+)")?[^\n]*\n(.*?)^```\s*$', re.M | re.S)
TOKEN = "docs-protocols-token-0c7a"
REGISTRY = """\
[models.general]
base_url = "{base_url}"
model = "scripted"
api_key_env = "OPENAI_API_KEY"
roles = ["general", "fast", "reasoning", "smart"]
abilities = {{ tool_call = true, json_mode = true }}
"""


def examples() -> list[tuple[str, str, str]]:
    """(file name, code, the output printed in the ``text`` block after it) of both pages."""
    out, files = [], []
    for page in PAGES:
        blocks = FENCE.findall(page.read_text())
        for i, (lang, title, code) in enumerate(blocks):
            if title:
                files.append((title, code))
            if lang == "python" and title:
                after = blocks[i + 1] if i + 1 < len(blocks) and blocks[i + 1][0] == "text" else None
                out.append((title, code, after[2] if after else ""))
    return out


def _script(llm: LLMFixture) -> None:
    s = llm.script
    s("What is 19 + 23? Use the add tool.", [reply_tool_calls([("a1", "add", {"a": 19, "b": 23})]),
                                             reply_text("19 + 23 is 42.")], synthesis=reply_text("19 + 23 is 42."))
    s("And doubled?", [reply_text("Doubled, that is 84.")], synthesis=reply_text("Doubled, that is 84."))
    s("Say hello.", [reply_text("Hello!")], synthesis=reply_text("Hello!"))
    s("Pay invoice 43: 120 to ACME.", [reply_tool_calls([("p1", "transfer", {"tag": "invoice-43", "amount": 120})]),
                                        reply_text("Invoice 43 is paid.")], synthesis=reply_text("Invoice 43 is paid."))
    s("What is 19 + 23?", [reply_tool_calls([("a2", "add", {"a": 19, "b": 23})]), reply_text("19 + 23 is 42.")],
      synthesis=reply_text("19 + 23 is 42."))
    s("The capital of France, as JSON.", [reply_text("Paris")])
    s("Question: The capital of France, as JSON.", [reply_tool_calls([("o1", "final_answer", {"city": "Paris"})])])
    s("Summarise the report.", [reply_text("The report says sales rose 12%.")],
      synthesis=reply_text("The report says sales rose 12%."))


@pytest.fixture(scope="module")
def docs_env(redis_url: str, llm: LLMFixture, backend: Any,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    work = tmp_path_factory.mktemp("protocols-docs")
    for page in PAGES:
        for _, title, code in FENCE.findall(page.read_text()):
            if title:
                (work / title).write_text(code)
    (work / "models.toml").write_text(REGISTRY.format(base_url=llm.server.base_url))
    url, extra = backend.isolated(10)
    if backend.kind != "cluster":
        backend.client(url).flushdb()
    _script(llm)
    env = worker_env(url, llm, **extra, REACTQ_MODELS=str(work / "models.toml"), REACTQ_API_TOKEN=TOKEN)
    factory = WorkerFactory(url, llm, work, {**extra, "REACTQ_MODELS": str(work / "models.toml")})
    factory.start("docs-protocols")
    gw = start_gateway(env, work / "gateway.log")
    res = httpx2.post(f"{gw.url}/v1/keys", headers={"Authorization": f"Bearer {TOKEN}"},
                     json={"tenant": "docs", "scopes": ["runs:read", "runs:write", "approvals:write"], "name": "docs"})
    assert res.status_code == 201, res.text
    env.update(REACTQ_GATEWAY=gw.url, REACTQ_API_KEY=res.json()["key"])
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    yield work, env
    stop_gateway(gw)
    factory.stop_all()


@pytest.mark.parametrize("name, code, printed", examples(), ids=[e[0] for e in examples()])
def test_each_example_prints_what_the_page_says(docs_env: tuple[Path, dict[str, str]], name: str, code: str,
                                                printed: str) -> None:
    work, env = docs_env
    done = subprocess.run([sys.executable, name], cwd=work, env=env, text=True, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == printed.strip()


async def test_the_client_configuration_starts_the_stdio_server(docs_env: tuple[Path, dict[str, str]]) -> None:
    work, env = docs_env
    config = json.loads((work / "mcp.json").read_text())["mcpServers"]
    stdio, http = config["reactq"], config["reactq-http"]
    assert http["url"].endswith("/mcp") and http["headers"]["Authorization"].startswith("Bearer ")
    params = StdioServerParameters(command=stdio["command"], args=stdio["args"], cwd=str(work),
                                   env={**env, **{k: v for k, v in stdio["env"].items() if k != "REACTQ_REDIS_URL"}})
    async with Client(params) as client:
        result = await client.call_tool("reactq_run", {"query": "Say hello."})
        assert result.content[0].text == "Hello!"  # type: ignore[union-attr]
