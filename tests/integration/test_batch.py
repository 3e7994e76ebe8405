"""``reactq batch`` as a subprocess: 200 lines, 5 malformed, interrupted twice (SIGINT, then
SIGKILL) and restarted with the same output file ⇒ 195 results + 5 line-numbered errors,
and every run submitted exactly once (issue 4)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import ROOT, at_a_terminal, worker_env
from reactq.shared.keys import Keys
from tests.scripted_server import first_user_text, reply_text

pytestmark = pytest.mark.integration

BAD_LINES = {
    17: "{this is not json",
    50: json.dumps({"id": "no-query", "model": "scripted"}),
    99: json.dumps({"id": "too-many", "query": "x", "max_iterations": 0}),
    150: json.dumps({"id": "bad-tool", "query": "x", "tools": ["rm_rf"]}),
    188: json.dumps(["not", "an", "object"]),
}
BAD_FIELDS = {17: "not valid JSON", 50: "query: Field required",
              99: "max_iterations: Input should be greater than or equal to 1",
              150: "tools: unknown tool names ['rm_rf']", 188: "expected a JSON object"}


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "dispatcher", "batch", *args], cwd=ROOT, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log.open("ab"),
                            preexec_fn=at_a_terminal)


def results(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line torn by SIGKILL is dropped by the next attempt
            pass
    return out


def wait_for_results(path: Path, n: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while len(results(path)) < n:
        assert proc.poll() is None, "the batch ended before it could be interrupted"
        assert time.monotonic() < deadline, f"fewer than {n} results after {timeout}s"
        time.sleep(0.05)


def runs_with_marker(r: Any, marker: str) -> list[str]:
    """Run ids in Redis whose query carries ``marker`` (other tests share this database)."""
    ids = [i.decode() for i in r.zrange("reactq:runs", 0, -1)]
    pipe = r.pipeline(transaction=False)
    for rid in ids:
        pipe.hget(Keys().run(rid), "request")
    return [rid for rid, req in zip(ids, pipe.execute(), strict=True) if req and marker in json.loads(req)["query"]]


def test_a_killed_batch_resumes_without_paying_twice(redis_url, llm, workers, r, tmp_path):
    marker = uuid.uuid4().hex[:10]
    lines, queries = [], {}
    for n in range(1, 201):
        if n in BAD_LINES:
            lines.append(BAD_LINES[n])
            continue
        q = llm.script(f"batch {marker} question <{n}>", [reply_text(f"loop {n}", delay=0.02)],
                       synthesis=reply_text(f"answer {n}"))
        queries[f"q{n}"] = q
        # Half the lines are full RunRequests with an id, half only carry a query (id = line number).
        lines.append(json.dumps({"id": f"q{n}", "query": q} if n % 2 else {"query": q, "max_iterations": 5}))
    src = tmp_path / "questions.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "answers.jsonl"
    log = tmp_path / "batch.log"
    env = worker_env(redis_url, llm)
    args = [str(src), "-o", str(out), "--concurrency", "8"]

    t0 = time.monotonic()
    first = start(args, env, log)
    wait_for_results(out, 40, first)
    first.send_signal(signal.SIGINT)  # Ctrl-C: stop submitting, leave in-flight runs running
    assert first.wait(20) == 130
    assert "rerun the same command to resume" in log.read_text()
    print(f"phase 1: {time.monotonic() - t0:.1f}s")

    second = start(args, env, log)
    wait_for_results(out, 110, second)
    second.kill()  # SIGKILL: no chance to clean up at all
    second.wait()
    assert len(results(out)) < 200
    print(f"phase 2: {time.monotonic() - t0:.1f}s")

    started = time.monotonic()
    third = subprocess.run([sys.executable, "-m", "dispatcher", "batch", *args], cwd=ROOT, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    print(f"third attempt: {time.monotonic() - started:.1f}s")
    assert third.returncode == 1, third.stderr  # 1: not every line succeeded (5 are invalid)
    assert "resuming:" in third.stderr

    final = results(out)
    assert len(final) == len(out.read_text().splitlines()) == 200  # no torn line left behind
    ok = [x for x in final if x["status"] == "succeeded"]
    bad = [x for x in final if x["status"] == "invalid"]
    assert len(ok) == 195 and len(bad) == 5
    assert sorted(x["line"] for x in bad) == sorted(BAD_LINES)
    for x in bad:
        assert x["error"].startswith(f"line {x['line']}: ") and BAD_FIELDS[x["line"]] in x["error"]
        assert str(x["line"]) in log.read_text() + third.stderr  # also reported on stderr
    # Every line answered exactly once, with its own answer and its id.
    assert Counter(x["line"] for x in final) == Counter(range(1, 201))
    for x in ok:
        assert x["answer"] == f"answer {x['line']}"
        assert x["id"] == (f"q{x['line']}" if x["line"] % 2 else x["line"])
        assert x["iterations"] == 1 and x["usage"]["total_tokens"] > 0 and x["error"] is None

    # Each run submitted once: 195 runs in Redis, the ones the results name.
    in_redis = runs_with_marker(r, marker)
    assert len(in_redis) == 195 == len({x["run_id"] for x in ok})
    assert set(in_redis) == {x["run_id"] for x in ok}
    # …and paid once at the model: one loop call per question (its first user message is
    # the query), and two requests in all that mention it (the loop call and the synthesis).
    bodies = llm.server.bodies
    mine = set(queries.values())
    loop_calls = Counter(q for q in (first_user_text(b) for b in bodies) if q in mine)
    assert len(loop_calls) == 195 and set(loop_calls.values()) == {1}
    per_question: Counter[str] = Counter()
    for b in bodies:
        text = json.dumps(b["messages"], ensure_ascii=False)
        if marker in text:
            per_question.update(set(re.findall(r"question <(\d+)>", text)))
    assert len(per_question) == 195 and set(per_question.values()) == {2}


@pytest.mark.core
def test_a_batch_of_only_good_lines_exits_0_and_a_rerun_submits_nothing(redis_url, llm, workers, r, tmp_path):
    marker = uuid.uuid4().hex[:10]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": i, "query": llm.script(f"small batch {marker} <{i}>", [reply_text("a")])}) + "\n"
                           for i in range(3)))
    out = tmp_path / "out.jsonl"
    env = worker_env(redis_url, llm)
    cmd = [sys.executable, "-m", "dispatcher", "batch", str(src), "-o", str(out), "-c", "2"]
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "3/3 done: 3 succeeded" in res.stderr
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "resuming: 3 of 3" in again.stderr
    assert len(results(out)) == 3 and len(runs_with_marker(r, marker)) == 3
