"""The bad-input corpus (``bench/faults/corpus.py``) against a real gateway, plus the CLI's.

Figures: requests tried, refused with the field named, 500s, other wrong answers, requests
after which Redis held anything new (a key, a queued message, a longer stream), CLI cases
tried and refused with exit 2.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import httpx2

from bench.cluster import Cluster
from bench.faults.common import BASE_ENV, GatewayProc
from bench.faults.corpus import all_cases, check


def _snapshot(r: Any) -> dict[bytes, Any]:
    out = {}
    for key in r.scan_iter(count=1000):
        kind = r.type(key)
        size = {b"list": r.llen, b"stream": r.xlen, b"hash": r.hlen, b"set": r.scard,
                b"zset": r.zcard}.get(kind, lambda k: 0)(key)
        out[key] = (kind, size)
    return out


def _http(cl: Cluster) -> dict[str, Any]:
    gw = GatewayProc(cl)
    try:
        with httpx2.Client(base_url=gw.url, timeout=30) as client:
            run = client.post("/v1/runs", json={"query": "a real run"}).json()["run_id"]
            dag = client.post("/v1/dags", json={"goal": "g", "steps": [{"id": "a", "task": "t"}]}).json()["dag_id"]
            r = cl.redis()
            tried = refused = fivehundreds = wrote = 0
            wrong: list[str] = []
            for case in all_cases(run, dag):
                before = _snapshot(r)
                res = case.send(client)
                tried += 1
                fivehundreds += res.status_code >= 500
                why = check(case, res)
                if why is None:
                    refused += 1
                else:
                    wrong.append(why[:160])
                wrote += _snapshot(r) != before
        return {"tried": tried, "refused_with_field": refused, "http_500": fivehundreds,
                "wrong": len(wrong), "wrong_sample": wrong[:5], "enqueued_or_written": wrote,
                "tracebacks_in_log": gw.log.read_text(errors="replace").count("Traceback")}
    finally:
        gw.stop()


def _cli(cl: Cluster) -> dict[str, Any]:
    from typer.testing import CliRunner

    from reactq.dispatcher.cli import app

    tmp = Path(tempfile.mkdtemp(prefix="reactq-badcli-"))
    (tmp / "bin.jsonl").write_bytes(b"\x00\x01" + json.dumps({"query": "q"}).encode())
    (tmp / "latin1.jsonl").write_bytes('{"query": "café"}\n'.encode("latin-1"))
    (tmp / "ok.jsonl").write_text(json.dumps({"query": "q"}) + "\n")
    cases = [["batch", str(tmp / "bin.jsonl"), "-o", str(tmp / "o.jsonl")],
             ["batch", str(tmp / "latin1.jsonl"), "-o", str(tmp / "o.jsonl")],
             ["batch", str(tmp / "ok.jsonl"), "-o", str(tmp / "missing" / "o.jsonl")],
             ["batch", str(tmp / "ok.jsonl"), "-o", str(tmp)],
             ["watch", "abc", "--after", "bogus"], ["watch", "abc", "--after", "99999999999999999999999"],
             ["status", "ID:events"], ["cancel", "a b"], ["interrupt", "ID:x", "hi"],
             ["run", "q", "--max-iterations", "true"], ["run", "q", "--max-iterations", "0"]]
    env = {k: None for k in os.environ if k.startswith(("REACTQ_", "OPENAI_"))}
    env.update(cl.worker_env(BASE_ENV))
    before = _snapshot(cl.redis())
    codes = [CliRunner().invoke(app, args, env=env).exit_code for args in cases]
    return {"tried": len(cases), "exit_2": codes.count(2), "codes": codes,
            "wrote": _snapshot(cl.redis()) != before}


def run() -> dict[str, Any]:
    with Cluster() as cl:
        return {"http": _http(cl), "cli": _cli(cl)}
