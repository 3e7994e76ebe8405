"""MCP servers as tools, without workers: listing, schemas, annotations, results, recovery.

Real servers: the repo's ``tests/mcp/demo_server.py`` over stdio and over streamable HTTP,
and the published ``mcp-server-time`` over stdio.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from reactq.shared.models import ToolResult
from reactq.shared.settings import Settings
from reactq.shared.tools.base import ToolArgumentsError
from reactq.shared.tools.loader import default_registry
from reactq.shared.tools.mcp import close_hub, load_mcp_config, mcp_tools
from reactq.shared.errors import ConfigError, ToolError
from tests.mcp.servers import HttpMcpServer, write_config

pytestmark = [pytest.mark.integration, pytest.mark.mcp]


@pytest.fixture(scope="module")
def http_server(tmp_path_factory):
    server = HttpMcpServer(tmp_path_factory.mktemp("mcp") / "http.log").start()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def tools(tmp_path_factory, http_server):
    path = tmp_path_factory.mktemp("cfg") / "mcp.toml"
    cfg = load_mcp_config(write_config(path, http_url=http_server.url))
    found = {t.name: t for t in mcp_tools(cfg)}
    yield found
    close_hub()


def run(coro):
    return asyncio.run(coro)


def test_every_server_is_listed_with_prefixed_names_and_schemas_passed_through(tools):
    assert {"demo__add", "web__add", "time__get_current_time", "time__convert_time"} <= set(tools)
    assert len([n for n in tools if n.startswith("demo__")]) >= 20, "a hub of 20+ tools"
    fn = tools["demo__add"].openai_schema()["function"]
    assert fn["name"] == "demo__add" and fn["description"] == "Add two integers."
    assert fn["parameters"]["properties"]["a"]["type"] == "integer"
    assert fn["parameters"]["required"] == ["a", "b"]
    tz = tools["time__get_current_time"].openai_schema()["function"]["parameters"]
    assert "timezone" in tz["properties"]


def test_annotations_decide_idempotent_with_mcp_defaults(tools):
    assert tools["demo__add"].idempotent is True            # readOnlyHint
    assert tools["demo__append_line"].idempotent is False   # destructiveHint
    assert tools["demo__fail"].idempotent is False          # no annotations at all
    assert tools["time__get_current_time"].idempotent is True


def test_calls_over_stdio_and_http_and_the_published_server(tools):
    assert run(tools["demo__add"].invoke({"a": 2, "b": 3})) == "5"
    assert run(tools["web__add"].invoke({"a": 40, "b": 2})) == "42"
    out = run(tools["time__get_current_time"].invoke({"timezone": "Europe/Paris"}))
    assert "Europe/Paris" in out


def test_bad_arguments_name_the_field_before_any_call(tools):
    with pytest.raises(ToolArgumentsError, match="'a' is a required property"):
        run(tools["demo__add"].invoke({"b": 1}))
    with pytest.raises(ToolArgumentsError, match="b: 'x' is not of type 'integer'"):
        run(tools["demo__add"].invoke({"a": 1, "b": "x"}))


def test_error_results_and_binary_content(tools):
    with pytest.raises(ToolError, match="Error executing tool fail"):
        run(tools["demo__fail"].invoke({"reason": "nope"}))
    pic = run(tools["demo__picture"].invoke({}))
    assert isinstance(pic, ToolResult)
    assert pic.artifacts[0].mime_type == "image/png" and pic.artifacts[0].size == 8
    assert "a red dot" in pic.content and "iVBOR" not in pic.content
    doc = run(tools["demo__readme"].invoke({}))
    assert doc.startswith("[resource file:///docs/readme.txt]\nhello hello")


def test_one_session_per_server_per_process_and_restart_after_the_server_died(tools, tmp_path):
    pids = {run(tools["demo__whoami"].invoke({})) for _ in range(3)}
    assert len(pids) == 1, "one stdio server process for the whole process"
    starts = tools["demo__whoami"].hub.starts("demo")
    pid_file = tmp_path / "pid"

    async def kill_mid_call() -> str:
        call = asyncio.ensure_future(tools["demo__slow"].invoke({"seconds": 20, "pid_file": str(pid_file)}))
        while not pid_file.exists():
            await asyncio.sleep(0.05)
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        try:
            await call
        except ToolError as exc:
            return str(exc)
        return "no error"

    started = time.monotonic()
    message = run(kill_mid_call())
    assert message.startswith("MCP server 'demo' is unavailable"), message
    assert time.monotonic() - started < 15, "the dead server is noticed, not waited out"
    assert run(tools["demo__add"].invoke({"a": 1, "b": 1})) == "2", "the next call recovers"
    assert tools["demo__add"].hub.starts("demo") == starts + 1


def test_http_server_down_is_an_error_then_recovers_when_it_is_back(tools, http_server):
    assert run(tools["web__add"].invoke({"a": 1, "b": 2})) == "3"
    http_server.kill()
    with pytest.raises(ToolError, match="MCP server 'web' is unavailable"):
        run(tools["web__add"].invoke({"a": 1, "b": 2}))
    http_server.start()
    assert run(tools["web__add"].invoke({"a": 2, "b": 2})) == "4"


def test_a_server_that_cannot_start_is_skipped_not_fatal(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[servers.ghost]\ncommand = "/nonexistent/mcp-server"\nconnect_timeout = 5\n')
    try:
        reg = default_registry(Settings(mcp=path))
        assert "calculator" in reg and not [n for n in reg.names() if n.startswith("ghost__")]
    finally:
        close_hub()


@pytest.mark.parametrize("body, message", [
    ("", "no [servers.NAME] table"),
    ("[servers.a]\n", "set exactly one of 'command'"),
    ('[servers.a]\ncommand = "x"\nurl = "http://h/mcp"\n', "set exactly one of 'command'"),
    ('[servers."a__b"]\ncommand = "x"\n', "without '__'"),
    ('[servers.a]\nurl = "ftp://h"\n', "must start with http"),
    ('[servers.a]\ncommand = "x"\nbogus = 1\n', "bogus: Extra inputs"),
    ("[servers\n", "not valid TOML"),
])
def test_bad_config_is_a_config_error_naming_the_problem(tmp_path, body, message):
    path = tmp_path / "mcp.toml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace(".", r"\.")):
        load_mcp_config(path)


def test_headers_from_env_are_read_at_connect_and_a_missing_variable_is_named(tmp_path, monkeypatch):
    path = tmp_path / "mcp.toml"
    path.write_text('[servers.crm]\nurl = "http://127.0.0.1:9/mcp"\n'
                    'headers_from_env = { Authorization = "CRM_TOKEN_FOR_TEST" }\n')
    cfg = load_mcp_config(path)[0]
    monkeypatch.delenv("CRM_TOKEN_FOR_TEST", raising=False)
    with pytest.raises(ConfigError, match="CRM_TOKEN_FOR_TEST"):
        cfg.resolved_headers()
    monkeypatch.setenv("CRM_TOKEN_FOR_TEST", "Bearer s3cret")
    assert cfg.resolved_headers() == {"Authorization": "Bearer s3cret"}
    assert "s3cret" not in repr(cfg.public())
