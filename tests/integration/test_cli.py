"""The ``reactq`` CLI as a subprocess against the test Redis, the session workers and the
scripted OpenAI-compatible server (issue 4: "--json output parsed; exit codes checked")."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import ROOT, at_a_terminal, worker_env
from tests.scripted_server import reply_error, reply_text, reply_tool_calls

pytestmark = pytest.mark.integration
CONSOLE_SCRIPT = Path(sys.executable).parent / "reactq"


def reactq(*args: str, env: dict[str, str], cwd: Path = ROOT, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dispatcher", *args], cwd=cwd, env=env, text=True,
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout)


def in_process(*args: str, env: dict[str, str]) -> Any:
    from typer.testing import CliRunner

    from reactq.dispatcher.cli import app

    return CliRunner().invoke(app, list(args), env=env)


def json_events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


@pytest.fixture
def env(redis_url, llm, workers) -> dict[str, str]:
    return worker_env(redis_url, llm, COLUMNS="100")


def calculator_script(llm: Any, text: str) -> str:
    return llm.script(llm.unique(text), [
        reply_tool_calls([("c1", "calculator", {"expression": "17*23"})], content="Let me compute."),
        reply_text("17*23 = 391"),
    ], synthesis=reply_text("17 × 23 = 391.", chunk_chars=3))


def test_run_json_prints_raw_events_and_status_reads_the_result(env, llm):
    q = calculator_script(llm, "cli json: what is 17*23?")
    res = reactq("run", q, "--json", env=env)
    assert res.returncode == 0, res.stderr
    events = json_events(res.stdout)
    assert all(set(e) == {"id", "event", "data"} for e in events)
    assert [e["data"]["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "succeeded"
    deltas = "".join(e["data"]["content"] for e in events if e["event"] == "answer" and e["data"]["status"] == "delta")
    assert deltas == "17 × 23 = 391." and len([e for e in events if e["event"] == "answer"]) > 3
    run_id = res.stderr.split("run ", 1)[1].split()[0]

    st = reactq("status", run_id, "--json", env=env)
    assert st.returncode == 0
    status = json.loads(st.stdout)
    assert status["status"] == "succeeded" and status["result"]["answer"] == "17 × 23 = 391."
    pretty = in_process("status", run_id, env=env)
    assert "succeeded" in pretty.stdout and "17 × 23 = 391." in pretty.stdout


def test_run_renders_thinking_tool_lines_the_answer_and_a_footer(env, llm):
    q = calculator_script(llm, "cli pretty: what is 17*23?")
    res = subprocess.run([str(CONSOLE_SCRIPT), "run", q], cwd=ROOT, env=env, text=True,
                         capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "think" in out and "Let me compute." in out
    assert 'calculator {"expression":"17*23"}' in out and "→ 391" in out
    assert "17 × 23 = 391." in out
    footer = out.strip().splitlines()[-1]
    assert "succeeded" in footer and "2 iterations" in footer and "tokens" in footer
    assert "reactq watch" in res.stderr


def test_a_failed_run_exits_1(env, llm):
    q = llm.script(llm.unique("cli: the model refuses"), [reply_error(400, {"error": {"message": "bad request"}})])
    res = reactq("run", q, "--json", env=env)
    assert res.returncode == 1, res.stdout + res.stderr
    done = json_events(res.stdout)[-1]
    assert done["event"] == "done" and done["data"]["status"] == "failed"
    assert any(e["event"] == "error" for e in json_events(res.stdout))


@pytest.mark.parametrize(("args", "words"), [
    # More bad-usage cases run in-process in tests/unit/test_cli_unit.py (no subprocess needed).
    (["run", "x", "--max-iterations", "0"], ["max_iterations", "greater than or equal to 1"]),
    (["run", "x", "--tools", "calculator,rm_rf"], ["tools", "rm_rf"]),
    (["status", "no-such-run"], ["no run"]),
])
def test_bad_usage_exits_2_naming_the_problem(env, r, args, words):
    before = r.zcard("reactq:runs")
    res = reactq(*args, env=env)
    assert res.returncode == 2, res.stdout + res.stderr
    for w in words:
        assert w in res.stderr, res.stderr
    assert r.zcard("reactq:runs") == before


def test_local_runs_in_process_without_redis(llm, redis_url, tmp_path):
    q = calculator_script(llm, "cli local: what is 17*23?")
    # Nothing listens on this port: --local must not need Redis at all.
    env = worker_env("redis://127.0.0.1:1/0", llm)
    res = reactq("run", q, "--local", env=env)
    assert res.returncode == 0, res.stderr
    assert "→ 391" in res.stdout and "17 × 23 = 391." in res.stdout
    assert "2 iterations" in res.stdout.strip().splitlines()[-1]


def test_ctrl_c_leaves_the_run_running_and_watch_picks_it_up(env, llm):
    """Without a terminal to ask on, Ctrl-C leaves the run running and prints how to watch it."""
    q = llm.script(llm.unique("cli: ctrl-c"), [
        reply_tool_calls([("c1", "slow", {"tag": "cli-ctrl-c", "seconds": 1.5})]),
        reply_text("done"),
    ], synthesis=reply_text("finished anyway"))
    proc = subprocess.Popen([sys.executable, "-m", "dispatcher", "run", q, "--json"], cwd=ROOT, env=env,
                            text=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=at_a_terminal)
    seen = []
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(json.loads(line))
        if seen[-1]["data"].get("type") == "iteration":
            break
    proc.send_signal(signal.SIGINT)
    rest_out, err = proc.communicate(timeout=20)
    seen += json_events(rest_out)
    assert proc.returncode == 130
    run_id = err.split("run ", 1)[1].split()[0]
    assert f"reactq watch {run_id}" in err and "left running" in err

    res = reactq("watch", run_id, "--json", "--after", seen[-1]["id"], env=env)
    assert res.returncode == 0
    rest = json_events(res.stdout)
    assert [e["data"]["seq"] for e in seen + rest] == list(range(1, len(seen) + len(rest) + 1))
    assert rest[-1]["data"]["answer"] == "finished anyway"


def test_ctrl_c_on_a_terminal_asks_and_cancels_the_run(env, llm, dispatcher):
    """With a terminal on stdin, Ctrl-C asks whether to cancel; answering y cancels the run."""
    q = llm.script(llm.unique("cli: ctrl-c on a tty"), [
        reply_tool_calls([("c1", "slow", {"tag": "cli-tty", "seconds": 5})]),
        reply_text("never"),
    ])
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "dispatcher", "run", q, "--json"], cwd=ROOT, env=env,
                            text=True, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=at_a_terminal)
    os.close(slave)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if json.loads(line)["data"].get("type") == "iteration":
                break
        proc.send_signal(signal.SIGINT)
        os.write(master, b"y\n")
        _, err = proc.communicate(timeout=20)
    finally:
        os.close(master)
    assert proc.returncode == 130
    assert "Cancel the run?" in err and "cancel requested" in err
    run_id = err.split("run ", 1)[1].split()[0]
    assert dispatcher.handle(run_id).result(timeout=20)["status"] == "cancelled"


def test_the_worker_command_starts_a_celery_worker_on_the_projects_queues(env, tmp_path):
    log = tmp_path / "worker.log"
    proc = subprocess.Popen([sys.executable, "-m", "dispatcher", "worker", "-c", "1", "-n", "clitest@%h",
                             "--without-mingle"], cwd=ROOT, env=env, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while " ready." not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)
        text = log.read_text()
        assert "clitest@" in text and "(thread)" in text
        assert ".> reactq.runs" in text and ".> reactq.tools" in text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)


def test_interrupt_cancel_and_watch_commands(env, llm, dispatcher):
    """In-process (typer's runner) against the real Redis and workers: these commands are
    thin, and four more interpreter start-ups would only slow the suite down."""
    from reactq.shared.requests import RunRequest

    q = llm.script(llm.unique("cli: cancel me"), [
        reply_tool_calls([("c1", "slow", {"tag": "cli-cancel", "seconds": 5})]),
        reply_text("never"),
    ])
    handle = dispatcher.submit(RunRequest(query=q))
    res = in_process("interrupt", handle.run_id, "use metric units", env=env)
    assert res.exit_code == 0 and len(res.stdout.strip()) == 12
    res = in_process("cancel", handle.run_id, env=env)
    assert res.exit_code == 0 and "cancel requested" in res.stdout
    res = in_process("watch", handle.run_id, env=env)
    assert res.exit_code == 1 and "cancelled" in res.stdout.strip().splitlines()[-1]
    res = in_process("interrupt", handle.run_id, "too late", env=env)
    assert res.exit_code == 1 and "already ended" in res.stderr


def test_a_fresh_machine_runs_on_the_embedded_server_with_local_workers(llm, tmp_path):
    """Issue 3 item 7: no REACTQ_REDIS_URL, no workers: `reactq run "what is 17*23?"` starts
    the embedded Valkey and a local worker, answers, and `reactq down` stops both."""
    llm.script("what is 17*23?", [
        reply_tool_calls([("c1", "calculator", {"expression": "17*23"})]),
        reply_text("391"),
    ], synthesis=reply_text("17*23 is 391."))
    env = worker_env("unused", llm, REACTQ_DATA_DIR=str(tmp_path / ".reactq"))
    del env["REACTQ_REDIS_URL"]
    try:
        started = time.monotonic()
        res = reactq("run", "what is 17*23?", env=env, cwd=tmp_path, timeout=90)
        assert res.returncode == 0, res.stderr + (tmp_path / ".reactq" / "worker-0.log").read_text()[-2000:]
        assert "17*23 is 391." in res.stdout and "starting a local one" in res.stderr
        info = json.loads((tmp_path / ".reactq" / "valkey.json").read_text())
        pids = json.loads((tmp_path / ".reactq" / "workers.json").read_text())
        assert info["port"] and len(pids) == 1
        print(f"cold start + run: {time.monotonic() - started:.1f}s")
    finally:
        down = reactq("down", env=env, cwd=tmp_path)
        # Scripts match by substring as a fallback: a bare "what is 17*23?" left behind would
        # answer other tests' synthesis prompts that quote their own "what is 17*23? [id]".
        llm.book.scripts.pop("what is 17*23?", None)
    assert down.returncode == 0 and "stopped 1 local worker" in down.stdout
    assert not (tmp_path / ".reactq" / "valkey.json").exists()
    assert wait_gone(info["pid"]) and all(wait_gone(p) for p in pids)


def wait_gone(pid: int, timeout: float = 5.0) -> bool:
    """The process exited (a zombie not yet reaped by its new parent counts as gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False
