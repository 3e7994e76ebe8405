"""Issue 10 item 7: every malformed request gets a 4xx naming the field — never a 500, never
a cut stream, nothing enqueued or written — and the CLI refuses bad arguments with exit 2.

The gateway is a real uvicorn process on its own Redis database, so "nothing written" is
checked on the whole keyspace. On the old gateway this failed: ``max_iterations: true`` and
``"5"`` were accepted (runs enqueued), NaN / lone surrogates / deep nesting / non-UTF-8
bodies gave 500s, ``ID:events`` reached Redis, unknown fields in interrupts and batches were
ignored, a 422 echoed a 100,000-character query, and interrupts had no cap.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx2
import pytest
import redis

from bench.faults.corpus import all_cases, check
from tests.integration.conftest import ROOT, worker_env
from tests.integration.test_gateway import start_gateway, stop_gateway

pytestmark = pytest.mark.integration


def _db_url(redis_url: str, db: int) -> str:
    return redis_url.rsplit("/", 1)[0] + f"/{db}"


def snapshot(r: redis.Redis) -> dict[bytes, Any]:
    """Every key with its size: what a refused request must leave unchanged."""
    out: dict[bytes, Any] = {}
    for key in r.scan_iter(count=1000):
        kind = r.type(key)
        size = {b"list": r.llen, b"stream": r.xlen, b"hash": r.hlen, b"set": r.scard,
                b"zset": r.zcard}.get(kind, lambda k, kind=kind: r.strlen(k) if kind == b"string" else 0)(key)
        out[key] = (kind, size)
    return out


@pytest.fixture
def gw(redis_url, llm, tmp_path):
    url = _db_url(redis_url, 7)
    redis.Redis.from_url(url).flushdb()
    env = worker_env(redis_url, llm, REACTQ_REDIS_URL=url, REACTQ_MAX_INTERRUPTS="3")
    gateway = start_gateway(env, tmp_path / "gateway.log", via_cli=False)
    yield gateway, redis.Redis.from_url(url)
    stop_gateway(gateway)


def test_the_bad_input_corpus_is_refused_with_the_field_named_and_nothing_written(gw):
    gateway, r = gw
    with httpx2.Client(base_url=gateway.url, timeout=30) as client:
        run = client.post("/v1/runs", json={"query": "a real run"}).json()["run_id"]
        dag = client.post("/v1/dags", json={"goal": "g", "steps": [{"id": "a", "task": "t"}]}).json()["dag_id"]
        before = snapshot(r)
        problems = [why for case in all_cases(run, dag) if (why := check(case, case.send(client)))]
        assert not problems, "\n".join(problems)
        assert snapshot(r) == before, "a refused request wrote to Redis"

        # Interrupts are capped per run: 3 here (REACTQ_MAX_INTERRUPTS), then a 429.
        for n in range(3):
            assert client.post(f"/v1/runs/{run}/interrupts", json={"content": f"m{n}"}).status_code == 202
        over = client.post(f"/v1/runs/{run}/interrupts", json={"content": "one too many"})
        assert over.status_code == 429 and over.json()["error"]["code"] == "rate_limited"
        assert over.json()["error"]["field"] == "content" and over.headers["retry-after"]
        assert r.xlen(f"reactq:run:{{{run}}}:interrupts") == 3 or 3 in {
            r.xlen(k) for k in r.scan_iter(match="*interrupts*")}
    assert "Traceback" not in gateway.log.read_text()


def _cli(args: list[str], env: dict[str, str], cwd: Path) -> Any:
    """The real CLI app in this process (a subprocess per case would take minutes);
    ``catch_exceptions=False``: a traceback fails the test."""
    from typer.testing import CliRunner

    from reactq.dispatcher.cli import app

    clean = {k: None for k in os.environ if k.startswith(("REACTQ_", "OPENAI_"))}
    return CliRunner().invoke(app, args, env={**clean, **env}, catch_exceptions=False)


def test_the_cli_refuses_bad_arguments_with_exit_2_before_submitting(redis_url, llm, workers, tmp_path):
    url = _db_url(redis_url, 8)
    r = redis.Redis.from_url(url)
    r.flushdb()
    env = worker_env(redis_url, llm, REACTQ_REDIS_URL=url)
    good = json.dumps({"query": "q"}) + "\n"
    (tmp_path / "binary.jsonl").write_bytes(b"\x00\x01\x02" + good.encode())
    (tmp_path / "latin1.jsonl").write_bytes('{"query": "café"}\n'.encode("latin-1"))
    (tmp_path / "ok.jsonl").write_text(good)
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "out.jsonl").write_text("")
    (tmp_path / "ro" / "out.jsonl").chmod(0o444)
    cases = [
        ["batch", str(tmp_path / "binary.jsonl"), "-o", str(tmp_path / "o1.jsonl")],
        ["batch", str(tmp_path / "latin1.jsonl"), "-o", str(tmp_path / "o2.jsonl")],
        ["batch", str(tmp_path / "ok.jsonl"), "-o", str(tmp_path / "nowhere" / "out.jsonl")],
        ["batch", str(tmp_path / "ok.jsonl"), "-o", str(tmp_path)],
        ["watch", "abc", "--after", "bogus"],
        ["status", "ID:events"],
        ["cancel", "ID:events"],
        ["interrupt", "ID:events", "hello"],
        ["run", "q", "--max-iterations", "true"],
    ]
    if os.geteuid() != 0:  # root can write a 0444 file
        cases.append(["batch", str(tmp_path / "ok.jsonl"), "-o", str(tmp_path / "ro" / "out.jsonl")])
    for args in cases:
        res = _cli(args, env, ROOT)
        assert res.exit_code == 2, (args, res.exit_code, res.output[-1500:])
        assert "Traceback" not in res.output, (args, res.output[-1500:])
    assert r.dbsize() == 0, "a refused command wrote to Redis"
    assert not (tmp_path / "o1.jsonl").exists() and not (tmp_path / "o2.jsonl").exists()

    # A UTF-8 BOM is fine, and a line nested too deeply is an `invalid` line like any other.
    deep = '{"query": "q", "metadata": {"x": ' + "[" * 200 + "]" * 200 + "}}\n"
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes("\ufeff".encode() + deep.encode())
    # (on the session workers' database: a batch starts a local worker when none answers)
    res = _cli(["batch", str(bom), "-o", str(tmp_path / "bom.out.jsonl")], worker_env(redis_url, llm), ROOT)
    assert res.exit_code == 1, res.output[-1500:]  # not every line succeeded
    lines = [json.loads(t) for t in (tmp_path / "bom.out.jsonl").read_text().splitlines()]
    assert [line["status"] for line in lines] == ["invalid"]
    assert "nested" in lines[0]["error"]
