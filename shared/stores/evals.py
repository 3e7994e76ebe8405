"""Evals in Redis: ``eval:{id}`` (a hash) and ``eval:{id}:cases`` (case id → scored record).

The eval's hash: ``status`` (running, done, cancelled), ``name``, ``tenant``, ``batch_id`` (the
batch its cases run as), ``config`` (JSON: evaluators, model, judge_model, system_prompt,
replay_from, live_tools), ``cases`` (JSON: the valid cases, with what their evaluators need),
``total`` (lines, invalid ones included), ``created_at``, ``updated_at``, and once it ended
``summary`` (JSON, ``reactq.shared.evals.report.summarize``) and ``pass_rate``. Both keys
live ``REACTQ_EVAL_TTL_S`` (30 days): the scores outlive the runs they scored. The index
``evals`` lists them (``GET /v1/evals``), like batches.
"""

from __future__ import annotations

import json
import time
from typing import Any, cast

import redis

from reactq.shared.evals.cases import EvalCase
from reactq.shared.evals.report import summarize
from reactq.shared.keys import Keys
from reactq.shared.stores.listing import ObjectIndex
from reactq.shared.tenants.tenancy import DEFAULT_TENANT

__all__ = ["EVAL_FIELDS", "EvalStore", "eval_row", "record_field"]

EVAL_FIELDS = ("status", "name", "total", "created_at", "updated_at", "tenant", "pass_rate", "batch_id")


def eval_row(raw: dict[str, Any]) -> dict[str, Any]:
    """A ``GET /v1/evals`` row from the hash fields."""
    rate = raw.get("pass_rate")
    return {"eval_id": raw["eval_id"], "name": raw.get("name") or None, "status": raw["status"],
            "batch_id": raw.get("batch_id"), "total": int(raw.get("total") or 0),
            "pass_rate": float(rate) if rate not in (None, "") else None,
            "created_at": float(raw.get("created_at") or 0), "updated_at": float(raw.get("updated_at") or 0)}


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class EvalStore:
    def __init__(self, r: redis.Redis, keys: Keys, ttl_seconds: int) -> None:
        self.r = r
        self.keys = keys
        self.ttl = ttl_seconds

    @property
    def index(self) -> ObjectIndex:
        return ObjectIndex(self.r, self.keys.evals_index, self.keys.eval, EVAL_FIELDS, "eval_id", self.ttl)

    def create(self, eval_id: str, *, batch_id: str, name: str | None, tenant: str, config: dict[str, Any],
               cases: list[tuple[int, EvalCase]], invalid: list[dict[str, Any]], total: int) -> None:
        """Store a new eval (``cases``: (line, case) of the valid ones; ``invalid``: case
        records of the bad lines, already final)."""
        now = f"{time.time():.6f}"
        self.index.add(eval_id, float(now))  # before the hash (a listing drops a member without one)
        key, cases_key = self.keys.eval(eval_id), self.keys.eval_cases(eval_id)
        pipe = self.r.pipeline(transaction=False)
        pipe.hset(key, mapping={
            "status": "running", "name": name or "", "tenant": tenant, "batch_id": batch_id,
            "config": json.dumps(config), "total": total, "created_at": now, "updated_at": now,
            "cases": json.dumps([{"line": line, **c.model_dump(mode="json")} for line, c in cases],
                                ensure_ascii=False)})
        if invalid:
            pipe.hset(cases_key, mapping={record_field(rec): json.dumps(rec, ensure_ascii=False) for rec in invalid})
        pipe.expire(key, self.ttl)
        pipe.expire(cases_key, self.ttl)
        pipe.execute()

    def meta(self, eval_id: str) -> dict[str, Any] | None:
        """The eval's hash (config and cases decoded), without its case records."""
        raw = cast(dict[bytes, bytes], self.r.hgetall(self.keys.eval(eval_id)))
        if not raw:
            return None
        f = {_s(k): _s(v) for k, v in raw.items()}
        return {"eval_id": eval_id, "name": f.get("name") or None, "status": f["status"],
                "tenant": f.get("tenant", DEFAULT_TENANT), "batch_id": f.get("batch_id"),
                "config": json.loads(f.get("config") or "{}"), "total": int(f.get("total") or 0),
                "created_at": float(f.get("created_at") or 0), "updated_at": float(f.get("updated_at") or 0),
                "cases": json.loads(f.get("cases") or "[]"),
                "summary": json.loads(f["summary"]) if f.get("summary") else None}

    def record(self, eval_id: str, rec: dict[str, Any]) -> None:
        """A case's scored record (its run ended and every evaluator answered)."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hset(self.keys.eval_cases(eval_id), record_field(rec), json.dumps(rec, ensure_ascii=False))
        pipe.hset(self.keys.eval(eval_id), "updated_at", f"{time.time():.6f}")
        pipe.execute()

    def scored(self, eval_id: str) -> set[str]:
        return {_s(k) for k in self.r.hkeys(self.keys.eval_cases(eval_id))}

    def case_records(self, eval_id: str) -> list[dict[str, Any]]:
        """Every case record so far, in the dataset's order."""
        raw = cast(dict[bytes, bytes], self.r.hgetall(self.keys.eval_cases(eval_id)))
        recs = [json.loads(v) for v in raw.values()]
        return sorted(recs, key=lambda rec: int(rec.get("line") or 0))

    def runs_by_case(self, eval_id: str) -> dict[str, str]:
        """Case id → the run that ran it (replay's source)."""
        return {r["case_id"]: r["run_id"] for r in self.case_records(eval_id) if r.get("run_id")}

    def finish(self, eval_id: str, status: str, summary: dict[str, Any]) -> None:
        key = self.keys.eval(eval_id)
        rate = summary.get("pass_rate")
        pipe = self.r.pipeline(transaction=False)
        pipe.hset(key, mapping={"status": status, "summary": json.dumps(summary),
                                "pass_rate": "" if rate is None else repr(rate), "updated_at": f"{time.time():.6f}"})
        pipe.expire(key, self.ttl)
        pipe.expire(self.keys.eval_cases(eval_id), self.ttl)
        pipe.execute()

    def view(self, eval_id: str) -> dict[str, Any] | None:
        """``GET /v1/evals/{id}``: the eval and its summary (so far, while it runs)."""
        meta = self.meta(eval_id)
        if meta is None:
            return None
        summary = meta.pop("summary") or summarize(self.case_records(eval_id), meta["config"].get("evaluators", []),
                                                   total=meta["total"])
        meta.pop("cases")
        return {**meta, **summary}


def record_field(rec: dict[str, Any]) -> str:
    """A case record's field: its case id; an invalid line's by line (its id may be missing,
    or another line's)."""
    return f"invalid:{rec['line']}" if rec["status"] == "invalid" else str(rec["case_id"])
