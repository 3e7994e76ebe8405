"""A first run with nothing configured: the bundled local model when its extra is installed,
else exit 2 before anything is submitted, saying what to set or install."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reactq.dispatcher import cli
from reactq.dispatcher.local import model as localmodel
from reactq.dispatcher.cli import runs
from reactq.shared.errors import ConfigError
from reactq.shared.llm.registry import load_registry
from reactq.shared.settings import Settings


@pytest.fixture
def bare_env(monkeypatch, tmp_path) -> Iterator[Path]:
    for k in list(os.environ):
        if k.startswith(("REACTQ_", "OPENAI_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("REACTQ_DATA_DIR", str(tmp_path))
    yield tmp_path


def test_no_model_and_no_local_extra_exits_2_before_submitting(bare_env, monkeypatch):
    monkeypatch.setattr(localmodel, "local_model_missing", lambda: "llama-cpp-python is not installed")

    def never(*a, **k):
        raise AssertionError("nothing may be submitted")

    monkeypatch.setattr(runs, "run_distributed", never)
    monkeypatch.setattr(runs, "run_in_process", never)
    for args in (["run", "what is 17*23?"], ["run", "what is 17*23?", "--local"], ["serve"], ["worker"]):
        res = CliRunner().invoke(cli.app, args)
        assert res.exit_code == 2, (args, res.output)
        text = " ".join(res.output.split())
        assert "no model is configured" in text and "OPENAI_API_KEY" in text
        assert "REACTQ_MODELS" in text and "make install-local" in text
        assert "llama-cpp-python is not installed" in text
    assert not (bare_env / "valkey").exists()


@pytest.mark.parametrize("env", [{"OPENAI_API_KEY": "k"}, {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"},
                                 {"REACTQ_MODELS": "models.toml"}])
def test_a_configured_model_is_used_as_it_is(bare_env, monkeypatch, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    s = Settings()
    assert localmodel.resolve_model(s) is s


def test_with_the_local_extra_the_shared_server_is_used_with_the_measured_registry(bare_env, monkeypatch):
    monkeypatch.setattr(localmodel, "local_model_missing", lambda: None)
    monkeypatch.setattr(localmodel, "shared_server", lambda s, stream=None: "http://127.0.0.1:7/v1")
    s = localmodel.resolve_model(Settings())
    assert s.models is not None and "REACTQ_MODELS" not in os.environ  # passed on, never exported
    entry = tomllib.loads(s.models.read_text())["models"]["smollm2"]
    assert entry["base_url"] == "http://127.0.0.1:7/v1" and entry["tool_results_as"] == "user"
    # JSON mode with the action schema as the grammar, one tool turn, the loop's answer
    # (README "First run": why).
    assert entry["abilities"] == {"tool_call": False, "json_mode": True, "json_schema": True}
    assert entry["json_schema_as"] == "json_object" and entry["extra_body"] == {"repeat_penalty": 1.0}
    assert (entry["max_tool_turns"], entry["answer_synthesis"]) == (1, False)
    llm = load_registry(s).get("smollm2")  # the file is valid for the registry loader
    assert (llm.max_tool_turns, llm.answer_synthesis) == (1, False)


@pytest.fixture
def models_server() -> Iterator[int]:
    class Models(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.end_headers()

        def log_message(self, *a: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()


def test_a_running_server_is_reused_not_started_twice(bare_env, monkeypatch, models_server):
    (bare_env / localmodel.STATE_FILE).write_text(json.dumps(
        {"pid": 1, "port": models_server, "chat_format": localmodel.CHAT_FORMAT}))

    def no_start(*a, **k):
        raise AssertionError("a second server was started")

    monkeypatch.setattr(localmodel, "LocalModelServer", no_start)
    assert localmodel.shared_server(Settings()) == f"http://127.0.0.1:{models_server}/v1"


def test_a_server_with_another_prompt_format_is_stopped_not_reused(bare_env, monkeypatch, models_server):
    """One started by an older reactq (chatml-function-calling, or no format recorded)."""
    old = subprocess.Popen(["sleep", "60"], start_new_session=True)
    (bare_env / localmodel.STATE_FILE).write_text(json.dumps(
        {"pid": old.pid, "port": models_server, "chat_format": "chatml-function-calling"}))
    started = []

    class Fake:
        def __init__(self, gguf, log_path):
            self.proc, self.port, self.chat_format = old, 4242, localmodel.CHAT_FORMAT
            self.base_url = "http://127.0.0.1:4242/v1"

        def start(self):
            started.append(self)
            return self

    monkeypatch.setattr(localmodel, "LocalModelServer", Fake)
    monkeypatch.setattr(localmodel, "find_gguf", lambda: Path("m.gguf"))
    try:
        assert localmodel.shared_server(Settings()) == "http://127.0.0.1:4242/v1"
        assert old.wait(10) == -signal.SIGTERM and len(started) == 1
        state = json.loads((bare_env / localmodel.STATE_FILE).read_text())
        assert state["chat_format"] == localmodel.CHAT_FORMAT
    finally:
        old.kill()
        old.wait()


def test_the_message_is_a_config_error(bare_env, monkeypatch):
    monkeypatch.setattr(localmodel, "local_model_missing", lambda: "x")
    with pytest.raises(ConfigError, match="no model is configured"):
        localmodel.resolve_model(Settings())
