"""The examples of docs/tenants.md and docs/cost.md, run as written: the key commands
against Redis, the client script against a real gateway, the TOML files through their
loaders, the price check as a script."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reactq.shared.llm.registry import load_model_specs
from reactq.shared.settings import Settings
from reactq.shared.tenants.quotas import load_tenants
from tests.integration.conftest import ROOT, worker_env
from tests.integration.test_gateway import start_gateway, stop_gateway
from tests.scripted_server import reply_text

pytestmark = pytest.mark.integration
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)


def blocks(page: str) -> list[tuple[str, str, str]]:
    """(language, info, code) of every fenced block of ``docs/<page>``."""
    text = (ROOT / "docs" / page).read_text()
    return [(m.group(1), m.group(2).strip(), m.group(3)) for m in FENCE.finditer(text)]


def titled(page: str, name: str) -> str:
    return next(code for _, info, code in blocks(page) if f'title="{name}"' in info)


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dispatcher", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_the_key_commands_as_written(redis_url: str, llm: Any) -> None:
    env = worker_env(redis_url, llm)
    (shell,) = [code for lang, _, code in blocks("tenants.md") if lang == "bash"]
    lines = [ln.split(maxsplit=1)[1] for ln in shell.strip().splitlines()]
    created = _cli(_split(lines[0]), env)
    assert created.returncode == 0, created.stderr
    key = json.loads(created.stdout)
    assert key["tenant"] == "acme" and key["scopes"] == ["runs:read", "runs:write"]
    assert key["key"].startswith("rq_") and key["name"] == "acme backend"
    listed = json.loads(_cli(_split(lines[1]), env).stdout)["keys"]
    mine = [k for k in listed if k["key_id"] == key["key_id"]]
    assert mine and "key" not in mine[0] and mine[0]["last_used_at"] is None
    revoked = _cli(_split(lines[2].replace("KEY_ID", key["key_id"])), env)
    assert revoked.returncode == 0, revoked.stderr
    assert key["key_id"] not in _cli(["keys", "list", "--json"], env).stdout
    bad = _cli(["keys", "create", "--tenant", "acme", "--scopes", "runs:everything"], env)
    assert bad.returncode == 2 and "runs:everything" in bad.stderr


def _split(line: str) -> list[str]:
    import shlex

    return shlex.split(line)


def test_the_client_script_against_a_gateway(redis_url: str, llm: Any, workers: Any, tmp_path: Path) -> None:
    env = worker_env(redis_url, llm, REACTQ_API_TOKEN="docs-admin-token")
    gw = start_gateway(env, tmp_path / "gateway.log")
    try:
        llm.script("What is 17*23?", [reply_text("391")], synthesis=reply_text("17*23 = 391"))
        created = _cli(["keys", "create", "--tenant", "acme", "--scopes", "runs:read,runs:write", "--json"], env)
        script = tmp_path / "tenant_client.py"
        script.write_text(titled("tenants.md", "tenant_client.py"))
        run_env = {**os.environ, "REACTQ_URL": gw.url, "REACTQ_KEY": json.loads(created.stdout)["key"]}
        out = subprocess.run([sys.executable, str(script)], env=run_env, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        assert "created " in out.stdout and "listed True" in out.stdout and "keys 403" in out.stdout
    finally:
        stop_gateway(gw)


def test_the_toml_files_load(tmp_path: Path) -> None:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(titled("tenants.md", "tenants.toml"))
    quotas = load_tenants(Settings(tenants=tenants))
    assert quotas["acme"].max_active_runs == 50 and quotas["acme"].cost_per_day_usd == 25.0
    assert quotas["nightly"].rpm is None
    models = tmp_path / "models.toml"
    models.write_text(titled("cost.md", "models.toml"))
    (spec,) = load_model_specs(models)
    assert spec.price is not None and spec.price.cached_input_per_mtok == 0.075


def test_the_price_check_prints_what_the_page_says(tmp_path: Path) -> None:
    script = tmp_path / "price_check.py"
    script.write_text(titled("cost.md", "price_check.py"))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0.00168"
    assert "which prints `0.00168`" in (ROOT / "docs" / "cost.md").read_text()


def test_the_403_body_on_the_page_is_the_gateways() -> None:
    from reactq.dispatcher.http.errors import forbidden

    (shown,) = [json.loads(code) for lang, _, code in blocks("tenants.md") if lang == "json"]
    assert shown == json.loads(bytes(forbidden("runs:write").body))


def test_the_budget_event_on_the_page_is_the_engines() -> None:
    from reactq.shared.engine import flowcontrol
    from reactq.shared.engine.state import RunState

    (shown,) = [json.loads(code) for lang, _, code in blocks("cost.md") if lang == "json"]
    state = RunState(run_id="r", query="q", model="m", mode="native", max_iterations=5, cost_budget_usd=0.05)
    error = flowcontrol.stop_for_cost(state, 0.0512, 0.05, "run", now=0.0)[0]
    assert error.channel == "error"
    assert {k: v for k, v in error.data.items() if k != "seq"} == shown
