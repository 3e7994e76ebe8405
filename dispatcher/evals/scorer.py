"""Scoring an eval's cases as their runs end: ``Scorer.submit(result line)``.

Each batch result line becomes a ``CaseResult`` (the run's tool calls and turns read from its
event stream), is scored by every evaluator of the eval, and is written to the eval's store.
Scoring runs in a small thread pool, so a slow judge never holds up the batch; ``judge``
calls share one event loop (one HTTP client) in a thread of their own. The judge's dollars are
added to the tenant's day (``tenant:{t}:spend:{day}``, held against its ``cost_per_day_usd``
like any call) and reported apart from the runs' (``judge_cost_usd``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from reactq.shared.evals.cases import EvalCase
from reactq.shared.evals.judge import Judged, judge
from reactq.shared.evals.report import case_passed
from reactq.shared.evals.scoring import JUDGE, CaseResult, Evaluator, Score, apply
from reactq.shared.llm.pricing import reserve_cost
from reactq.shared.stores.evals import EvalStore

log = logging.getLogger(__name__)

#: Cases scored at once (event reads, evaluators, judge calls).
SCORING_THREADS = 8
#: Tokens a judge call reserves against the tenant's daily cap, besides its prompt.
JUDGE_COMPLETION = 400


def case_result(d: Any, res: dict[str, Any]) -> CaseResult:
    """A batch result line (and its run's events) as evaluators see it."""
    usage = res.get("usage") or {}
    out = CaseResult(case_id=str(res["id"]), run_id=res.get("run_id"), status=str(res["status"]),
                     answer=res.get("answer"), output=res.get("output"), error=res.get("error"),
                     cost_usd=float(usage.get("cost_usd") or 0.0), tokens=int(usage.get("total_tokens") or 0),
                     latency_ms=round(float(res.get("elapsed") or 0.0) * 1000, 3))
    if out.run_id is None:
        return out
    after: str | None = None
    while True:
        batch = d.store.read_events(out.run_id, after, count=1000)
        for stream_id, event in batch:
            after = stream_id
            data = event.data
            if event.channel == "step" and data.get("status") == "start":
                if data.get("type") == "thinking":
                    out.turns += 1
                elif data.get("type") == "iteration":
                    args = data.get("approved_args") or data.get("tool_args") or {}
                    out.tool_calls.append({"name": data.get("tool_name"), "args": args})
        if len(batch) < 1000:
            return out


class _JudgeLoop:
    """One event loop in a thread of its own, for the judge's async LLM calls."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="reactq-eval-judge", daemon=True)
        self.thread.start()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class Scorer:
    """Scores the cases of one eval; ``close()`` waits for the ones submitted."""

    def __init__(self, d: Any, store: EvalStore, eval_id: str, cases: dict[str, tuple[int, EvalCase]],
                 evaluators: list[Evaluator], *, tenant: str, judge_model: str | None = None) -> None:
        self.d = d
        self.store = store
        self.eval_id = eval_id
        self.cases = cases
        self.evaluators = evaluators
        self.tenant = tenant
        self.judge_model = judge_model
        self.pool = ThreadPoolExecutor(SCORING_THREADS, thread_name_prefix="reactq-eval")
        self.pending: list[Future[None]] = []
        self._judge: tuple[Any, _JudgeLoop] | None = None
        self._lock = threading.Lock()
        self.scored = 0

    def submit(self, res: dict[str, Any]) -> None:
        self.pending.append(self.pool.submit(self._score, res))

    def close(self) -> None:
        for fut in self.pending:
            fut.result()
        self.pool.shutdown(wait=True)
        if self._judge is not None:
            self._judge[1].close()

    # -- one case ------------------------------------------------------------------------
    def _score(self, res: dict[str, Any]) -> None:
        try:
            self.store.record(self.eval_id, self.record(res))
        except Exception:  # a case that could not be scored must not stop the others
            log.exception("eval %s: scoring line %s failed", self.eval_id, res.get("line"))
        with self._lock:
            self.scored += 1

    def record(self, res: dict[str, Any]) -> dict[str, Any]:
        """The case record of one batch result line (scored when its run ended)."""
        base = {"case_id": str(res["id"]), "line": res["line"], "run_id": res.get("run_id"),
                "status": res["status"], "answer": res.get("answer"), "output": res.get("output"),
                "error": res.get("error"), "cost_usd": 0.0, "tokens": 0, "turns": 0, "latency_ms": None,
                "judge_cost_usd": 0.0, "scores": {}, "passed": False}
        found = self.cases.get(str(res["id"]))
        if res["status"] in ("invalid", "skipped") or found is None or res.get("run_id") is None:
            return base
        case = found[1]
        result = case_result(self.d, res)
        scores: dict[str, dict[str, Any]] = {}
        judge_cost = 0.0
        for ev in self.evaluators:
            if ev.name == JUDGE:
                judged = self._judge_case(case, result)
                judge_cost = judged.cost_usd
                score = judged.score
            else:
                score = apply(ev, case, result)
            if score is not None:
                scores[ev.name] = score.as_dict()
        return {**base, "cost_usd": result.cost_usd, "tokens": result.tokens, "turns": result.turns,
                "latency_ms": result.latency_ms, "judge_cost_usd": judge_cost, "scores": scores,
                "passed": case_passed(res["status"], scores)}

    # -- the judge -----------------------------------------------------------------------
    def _judge_llm(self) -> tuple[Any, _JudgeLoop]:
        with self._lock:
            if self._judge is None:
                from reactq.shared.llm.registry import load_registry

                registry = load_registry(self.d.settings)
                llm = registry.get(self.judge_model) if self.judge_model else registry.resolve("smart")
                self._judge = (llm, _JudgeLoop())
            return self._judge

    def _judge_case(self, case: EvalCase, result: CaseResult) -> Judged:
        if case.expected is None:
            return Judged(None)
        try:
            llm, loop = self._judge_llm()
            member = f"judge:{uuid.uuid4().hex}"
            refused = self._reserve(llm, member, case, result)
            if refused is not None:
                return Judged(Score(0.0, refused))
            judged: Judged = loop.run(judge(llm, case, result, getattr(llm, "price", None)))
            self._settle(member, judged.cost_usd)
            return judged
        except Exception as exc:  # the judge's failure is this case's score, not the eval's end
            return Judged(Score(0.0, f"judge failed: {type(exc).__name__}: {str(exc)[:300]}"))

    def _reserve(self, llm: Any, member: str, case: EvalCase, result: CaseResult) -> str | None:
        """Hold the judge call's worst case against the tenant's daily cap (None: held)."""
        from reactq.shared.stores.spend import TenantSpend
        from reactq.shared.tenants.quotas import quota_of

        price = getattr(llm, "price", None)
        cap = quota_of(self.d.settings, self.tenant).cost_per_day_usd
        if price is None:
            return None
        chars = len(case.query) + len(str(case.expected)) + len(result.answer or "") + 600
        amount = reserve_cost(chars // 3, JUDGE_COMPLETION, price)
        got = TenantSpend(self.d.redis, self.d.keys).reserve(self.tenant, member, amount, cap)
        return None if got.ok else "not judged: the tenant's daily cost cap (cost_per_day_usd) is reached"

    def _settle(self, member: str, cost: float) -> None:
        from reactq.shared.stores.spend import TenantSpend

        TenantSpend(self.d.redis, self.d.keys).settle_op(self.tenant, member, cost).run(self.d.redis)
