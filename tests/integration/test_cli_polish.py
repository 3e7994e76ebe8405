"""The command line a new user meets: ``--json`` errors as one JSON object on stderr (exit codes
unchanged), readable usage, whole ids in tables, an honest ``reactq down``, ``reactq env``."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.integration.conftest import worker_env
from tests.integration.test_cli import reactq

pytestmark = pytest.mark.integration


@pytest.fixture
def env(redis_url: str, llm: Any) -> dict[str, str]:
    return worker_env(redis_url, llm, COLUMNS="80")


def _error(res: Any) -> dict[str, Any]:
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    body = json.loads(lines[0])
    assert set(body) == {"error"} and {"code", "message"} <= set(body["error"]), body
    return dict(body["error"])


def test_json_errors_are_one_object_on_stderr_with_the_usual_exit_codes(env: dict[str, str]) -> None:
    missing = reactq("run", "--json", env=env)
    assert missing.returncode == 2 and missing.stdout == ""
    assert _error(missing)["code"] == "usage_error" and "QUERY" in _error(missing)["message"]

    bad_option = reactq("runs", "--limit", "many", "--json", env=env)
    assert bad_option.returncode == 2 and _error(bad_option)["field"] == "--limit"

    bad_status = reactq("runs", "--status", "nope", "--json", env=env)
    assert bad_status.returncode == 2
    assert _error(bad_status) == {"code": "usage_error", "field": "--status",
                                  "message": _error(bad_status)["message"]}

    unknown = reactq("status", uuid.uuid4().hex, "--json", env=env)
    assert unknown.returncode == 2 and _error(unknown)["code"] == "not_found"
    assert _error(unknown)["field"] == "run_id"

    refused = reactq("run", "hi", "--max-iterations", "0", "--json", env=env)
    assert refused.returncode == 2
    assert _error(refused)["code"] == "validation_error" and _error(refused)["field"] == "max_iterations"

    dag = reactq("dag", "status", "--json", env=env)
    assert dag.returncode == 2 and _error(dag)["code"] == "usage_error"

    unreachable = reactq("status", uuid.uuid4().hex, "--json", env={**env, "REACTQ_REDIS_URL": "redis://127.0.0.1:1/0"})
    assert unreachable.returncode == 1 and _error(unreachable)["code"] == "unavailable"

    plain = reactq("status", uuid.uuid4().hex, env=env)
    assert plain.returncode == 2 and plain.stderr.startswith("error: ")


def test_usage_is_readable_and_tables_keep_whole_ids(env: dict[str, str], workers: Any, dispatcher: Any,
                                                     llm: Any) -> None:
    from reactq.shared.requests import RunRequest
    from tests.scripted_server import reply_text

    usage = reactq("run", "--help", env=env).stdout
    assert " run [OPTIONS] QUERY" in usage and "{query}" not in usage and "<bool>" not in usage
    q = llm.script(llm.unique("a run with a long question " * 4), [reply_text("ok")], synthesis=reply_text("ok"))
    h = dispatcher.submit(RunRequest(query=q, completion_check=False))
    h.result(timeout=30)
    listed = reactq("runs", "--limit", "3", env=env)
    assert listed.returncode == 0 and h.run_id in listed.stdout, listed.stdout


def test_down_says_when_nothing_ran_and_env_names_the_server_in_use(llm: Any, tmp_path: Path) -> None:
    env = worker_env("unused", llm, REACTQ_DATA_DIR=str(tmp_path / "data"))
    del env["REACTQ_REDIS_URL"]
    nothing = reactq("down", env=env, cwd=tmp_path)
    assert nothing.returncode == 0 and nothing.stdout.startswith("nothing to stop"), nothing.stdout
    try:
        shown = reactq("env", env=env, cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        values = dict(line.removeprefix("export ").split("=", 1) for line in shown.stdout.splitlines())
        assert redis.Redis.from_url(values["REACTQ_REDIS_URL"]).ping()
        assert json.loads(reactq("env", "--json", env=env, cwd=tmp_path).stdout)["REACTQ_REDIS_URL"] == \
            values["REACTQ_REDIS_URL"], "the same server: it is attached to, not started again"
    finally:
        down = reactq("down", env=env, cwd=tmp_path)
    assert down.stdout.strip() == "stopped the embedded server"
    configured = reactq("env", env={**env, "REACTQ_REDIS_URL": "redis://:secret@db:6379/0"}, cwd=tmp_path)
    assert "secret" not in configured.stdout and "REACTQ_REDIS_URL=redis://:***@db:6379/0" in configured.stdout


def test_models_shows_the_registry_runs_use(llm: Any, tmp_path: Path) -> None:
    env = {k: v for k, v in worker_env("redis://127.0.0.1:1/0", llm).items() if not k.startswith("OPENAI_")}
    env.pop("REACTQ_MODEL")
    env["REACTQ_DATA_DIR"] = str(tmp_path)
    none = reactq("models", "--json", env=env, cwd=tmp_path)
    assert none.returncode == 2 and _error(none)["code"] == "config_error"
    assert "gpt-4o-mini" not in none.stdout + none.stderr
    (tmp_path / "local-models.toml").write_text(
        '[models.local]\nmodel = "smollm2-135m-instruct"\nbase_url = "http://127.0.0.1:9/v1"\nroles = ["general"]\n')
    shown = reactq("models", "--json", env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert [m["model"] for m in json.loads(shown.stdout)] == ["smollm2-135m-instruct"]
