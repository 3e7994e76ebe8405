"""Making an eval: its cases checked, its batch created, its record stored.

``prepare`` turns the dataset into batch lines (a case that is not valid, or whose run request
is not, becomes an ``invalid`` line naming the line and the field); ``check`` refuses what
makes the whole eval wrong (an unknown evaluator, model, judge model or replayed eval) before
anything is stored; ``start_eval`` stores the batch and the eval. The batch is created by one
call, ``submit_eval_batch``: the path every HTTP batch takes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from reactq.dispatcher.batch.items import BatchItem, mark_duplicates, parse_obj
from reactq.dispatcher.batch.store import BatchStore
from reactq.shared.api.evals import EvalOptions
from reactq.shared.errors import RequestError
from reactq.shared.evals.cases import EvalCase, InvalidCase, parse_case, parse_case_line, run_fields
from reactq.shared.evals.scoring import JUDGE, load_evaluators, resolve
from reactq.shared.stores.evals import EvalStore
from reactq.shared.stores.keys import Caller


@dataclass
class Prepared:
    """A dataset as batch lines: every line's item, and the valid cases by line."""

    items: list[BatchItem]
    cases: list[tuple[int, EvalCase]] = field(default_factory=list)

    @property
    def invalid(self) -> list[dict[str, Any]]:
        return [{"line": it.line, "id": it.id, "error": it.error} for it in self.items if it.error]

    def invalid_records(self) -> list[dict[str, Any]]:
        return [{"case_id": None if it.id is None else str(it.id), "line": it.line, "run_id": None,
                 "status": "invalid", "error": it.error, "answer": None, "output": None, "scores": {},
                 "passed": False, "cost_usd": 0.0, "judge_cost_usd": 0.0, "tokens": 0, "turns": 0,
                 "latency_ms": None} for it in self.items if it.error]


Parsed = list[tuple[int, EvalCase | InvalidCase]]


def parse_lines(lines: Iterable[str]) -> Parsed:
    """A JSONL dataset: (line, case or why not) (blank lines skipped, still counted)."""
    return [(n, parse_case_line(text, n)) for n, text in enumerate(lines, 1) if text.strip()]


def parse_objects(objs: list[Any]) -> Parsed:
    return [(n, parse_case(obj, n)) for n, obj in enumerate(objs, 1)]


def prepare(d: Any, parsed: Parsed, spec: EvalOptions) -> Prepared:
    """Each case's batch line, validated as a ``RunRequest`` (tools, model, output schema)."""
    items: list[BatchItem] = []
    lines: dict[int, EvalCase] = {}
    for line, got in parsed:
        if isinstance(got, InvalidCase):
            items.append(BatchItem(line, got.id if got.id is not None else line, error=got.error))
            continue
        items.append(parse_obj(run_fields(got, model=spec.model, system_prompt=spec.system_prompt), line,
                               d.validate))
        lines[line] = got
    mark_duplicates(items)
    return Prepared(items, [(it.line, lines[it.line]) for it in items if it.request is not None])


def check(d: Any, spec: EvalOptions, evals: EvalStore, *, tenant: str, admin: bool = False) -> None:
    """What would make the whole eval wrong: ``RequestError`` naming the field."""
    resolve(spec.evaluators, load_evaluators(d.settings.evaluators))
    _, models = d.catalog()
    if spec.model is not None and spec.model not in models:
        raise RequestError(f"unknown model {spec.model!r}; known: {models[:20]}", field="model")
    if spec.judge_model is not None:
        if JUDGE not in spec.evaluators:
            raise RequestError("judge_model is only used with the 'judge' evaluator", field="judge_model")
        from reactq.shared.llm.registry import load_registry

        # The judge is asked from where the eval is scored (this process): its registry decides.
        local = load_registry(d.settings).list_models()
        if spec.judge_model not in local:
            raise RequestError(f"unknown model {spec.judge_model!r}; known here: {local[:20]}", field="judge_model")
    if spec.live_tools and spec.replay_from is None:
        raise RequestError("live_tools applies to a replay: give replay_from too", field="live_tools")
    if spec.replay_from is not None:
        meta = evals.meta(spec.replay_from)
        if meta is None or not (admin or meta["tenant"] == tenant):
            raise RequestError(f"no eval with id {spec.replay_from!r} to replay (it may have expired)",
                               field="replay_from")


def attach_replay(prepared: Prepared, spec: EvalOptions, evals: EvalStore) -> None:
    """With ``replay_from``: each line's run answers its tool calls from the earlier eval's run
    of the same case id (the engine's recorded ledger: only calls recorded ``done`` match,
    each at most once, none is executed again; a call that matches none is not executed
    unless ``live_tools``). A case the earlier eval did not run has nothing recorded."""
    if spec.replay_from is None:
        return
    from reactq.shared.engine.recorded import ReplayPolicy

    sources = evals.runs_by_case(spec.replay_from)
    for item in prepared.items:
        if item.request is None:
            continue
        source = sources.get(str(item.id))
        if source is None and spec.live_tools:
            continue  # nothing recorded, every call runs: an ordinary run
        item.replay = ReplayPolicy(
            source_run=source or f"none-{spec.replay_from}", reuse="all", match="done",
            unmatched="run" if spec.live_tools else "refuse", label=f"eval {spec.replay_from}",
        ).model_dump(mode="json")


def submit_eval_batch(d: Any, batches: BatchStore, items: list[BatchItem], *, concurrency: int, tenant: str,
                      eval_id: str, caller: Caller | None = None) -> str:
    """The eval's cases enter as one batch, through the path every HTTP batch takes: the
    door's checks of its lines up front (``Door.check_batch``: the scopes they need, the
    dollar-cap rule), then the stored batch, whose driver submits each line through the door.
    Raises ``RequestError`` (422) or ``Forbidden`` (403)."""
    d.door.check_batch([it.request for it in items if it.request is not None], tenant=tenant, caller=caller,
                       batch_cap=None)
    batch_id = batches.create(items, concurrency, tenant=tenant)
    batches.r.hset(batches.keys.batch(batch_id), "eval_id", eval_id)
    return batch_id


def start_eval(d: Any, evals: EvalStore, batches: BatchStore, prepared: Prepared, spec: EvalOptions, *,
               tenant: str, caller: Caller | None = None) -> tuple[str, str]:
    """Store the eval and its batch; returns (eval_id, batch_id). The caller drives it."""
    eval_id = uuid.uuid4().hex
    attach_replay(prepared, spec, evals)
    batch_id = submit_eval_batch(d, batches, prepared.items, concurrency=spec.concurrency, tenant=tenant,
                                 eval_id=eval_id, caller=caller)
    config = spec.model_dump(mode="json", include={"evaluators", "model", "judge_model", "system_prompt",
                                                   "replay_from", "live_tools", "concurrency"})
    evals.create(eval_id, batch_id=batch_id, name=spec.name, tenant=tenant, config=config,
                 cases=prepared.cases, invalid=prepared.invalid_records(), total=len(prepared.items))
    return eval_id, batch_id
