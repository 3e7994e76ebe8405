"""``reactq eval DATASET.jsonl``: run every case as a line of one batch, here, scoring each run
as it ends; ``reactq eval show ID`` and ``reactq eval compare A B`` read stored evals.

Exit codes: 0 the eval ran (and, with ``--fail-under``, its pass rate is at least that); 1 its
pass rate is below ``--fail-under``; 2 bad input (no such file, an unknown evaluator or model,
no valid case at all, an id that names nothing); 130 interrupted (the eval's batch is left to
a gateway, which resumes and scores it).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Optional

import typer
from pydantic import ValidationError

from reactq.dispatcher.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    check_id,
    dispatcher,
    ensure_local_workers,
    err,
    fail,
    out,
    print_json,
    settings,
    validation_message,
)
from reactq.shared.errors import ConfigError, RequestError


def run_eval(
    dataset: Path = typer.Argument(..., exists=True, dir_okay=False, readable=True,
                                   help="JSONL: one case {id, query, expected?, …} per line"),
    evaluators: str = typer.Option("exact", "--evaluators", "-e",
                                   help="comma-separated: exact, contains, regex, json_schema, tool_calls, "
                                        "judge, max_turns, max_cost_usd, or custom ones (REACTQ_EVALUATORS)"),
    model: Optional[str] = typer.Option(None, "--model", help="the model of every case that names none"),
    judge_model: Optional[str] = typer.Option(None, "--judge-model", help="the model 'judge' asks"),
    system_prompt: Optional[str] = typer.Option(None, "--system-prompt", help="every case's system prompt"),
    concurrency: int = typer.Option(8, "--concurrency", "-c", min=1, max=1000, help="runs in flight (1-1000)"),
    replay_from: Optional[str] = typer.Option(None, "--replay-from",
                                              help="answer tool calls from this earlier eval's runs"),
    live_tools: bool = typer.Option(False, "--live-tools", help="with --replay-from: run calls it did not record"),
    name: Optional[str] = typer.Option(None, "--name", help="a name to find the eval by"),
    report: Optional[Path] = typer.Option(None, "--output", "-o", help="write the JSON report here"),
    as_json: bool = typer.Option(False, "--json", help="print the JSON report instead of the table"),
    fail_under: Optional[float] = typer.Option(None, "--fail-under", min=0.0, max=1.0,
                                               help="exit 1 when the pass rate is below this (0..1)"),
) -> None:
    """Run a dataset of cases as one batch and score every run; a table and a JSON report."""
    from reactq.dispatcher.cli.checks import input_file_problem
    from reactq.shared.api.evals import EvalOptions

    if why := input_file_problem(dataset):
        fail(why)
    try:
        spec = EvalOptions(name=name, evaluators=[e.strip() for e in evaluators.split(",") if e.strip()],
                           model=model, judge_model=judge_model, system_prompt=system_prompt,
                           concurrency=concurrency, replay_from=replay_from, live_tools=live_tools)
    except ValidationError as exc:
        fail(validation_message(exc))
    view, records = _run(dataset, spec)
    result = {"eval": view, "cases": records}
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n")
    if as_json:
        print_json(result)
    else:
        print_view(view)
    rate = view.get("pass_rate")
    if fail_under is not None and (rate is None or rate < fail_under):
        err.print(f"pass rate {_pct(rate)} is below --fail-under {fail_under:.0%}")
        raise typer.Exit(EXIT_FAILED)
    raise typer.Exit(EXIT_OK)


def _run(dataset: Path, spec: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Create the eval, drive its batch here with a progress bar, return (view, case records)."""
    from reactq.dispatcher.batch.store import BatchStore, holder_name
    from reactq.dispatcher.evals.create import check, parse_lines, prepare, start_eval
    from reactq.shared.stores.evals import EvalStore
    from reactq.shared.tenants.tenancy import DEFAULT_TENANT

    s = settings()
    d = dispatcher(s)
    evals = EvalStore(d.redis, d.keys, d.settings.eval_ttl_s)
    batches = BatchStore(d.redis, d.keys, d.settings.run_ttl_seconds)
    try:
        d.catalog()
        check(d, spec, evals, tenant=DEFAULT_TENANT, admin=True)
        with dataset.open(encoding="utf-8-sig") as fh:
            prepared = prepare(d, parse_lines(fh), spec)
    except RequestError as exc:
        fail(f"{exc.field}: {exc}" if exc.field else str(exc))
    except ConfigError as exc:
        fail(str(exc))
    except UnicodeDecodeError as exc:
        fail(f"{dataset}: not UTF-8 text ({exc.reason})")
    for bad in prepared.invalid:
        err.print(f"[yellow]invalid[/] {bad['error']}", markup=True, highlight=False)
    if not prepared.cases:
        fail(f"{dataset}: no valid case to run")
    ensure_local_workers(s, d)
    try:
        eval_id, batch_id = start_eval(d, evals, batches, prepared, spec, tenant=DEFAULT_TENANT)
    except RequestError as exc:
        fail(f"{exc.field}: {exc}" if exc.field else str(exc))
    holder = holder_name()
    batches.claim(batch_id, holder)
    err.print(f"eval {eval_id} (batch {batch_id}): {len(prepared.items)} cases")
    view = _drive(d, evals, batches, eval_id, holder, len(prepared.items))
    return view, evals.case_records(eval_id)


def _drive(d: Any, evals: Any, batches: Any, eval_id: str, holder: str, total: int) -> dict[str, Any]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from reactq.dispatcher.evals.drive import drive_eval

    stop = threading.Event()
    with Progress(SpinnerColumn(), TextColumn("[bold]eval"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, refresh_per_second=8) as bar:
        task = bar.add_task("eval", total=total)
        try:
            view = drive_eval(d, evals, batches, eval_id, holder, stop,
                              on_progress=lambda scorer: bar.update(task, completed=scorer.scored))
        except KeyboardInterrupt:
            stop.set()
            view = None
        bar.update(task, completed=len(evals.scored(eval_id)))
    if view is None:
        batches.release(evals.meta(eval_id)["batch_id"])
        err.print(f"interrupted: eval {eval_id} goes on when a gateway ('reactq serve') resumes its batch")
        raise typer.Exit(EXIT_INTERRUPTED)
    return view


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _money(value: float | None) -> str:
    return f"${float(value or 0):.4f}"


def print_view(view: dict[str, Any]) -> None:
    """The eval's table: per evaluator pass rate and mean; then cases, cost, tokens, latency."""
    from rich.table import Table

    table = Table(title=f"eval {view['eval_id']}" + (f" ({view['name']})" if view.get("name") else ""))
    for col in ("evaluator", "pass rate", "mean", "scored"):
        table.add_column(col, justify="left" if col == "evaluator" else "right")
    for name, sc in view["scores"].items():
        mean = "-" if sc["mean"] is None else f"{sc['mean']:.3f}"
        table.add_row(name, _pct(sc["pass_rate"]), mean, str(sc["scored"]))
    out.print(table)
    c, lat = view["counts"], view["latency_ms"]
    out.print(f"cases {c['total']}: {c['passed']} passed ({_pct(view['pass_rate'])}), {c['succeeded']} succeeded, "
              f"{c['failed']} failed, {c['invalid']} invalid, {c['skipped']} skipped")
    out.print(f"cost {_money(view['cost_usd'])} (judge {_money(view['judge_cost_usd'])} apart), "
              f"{view['tokens']:,} tokens, latency p50 {lat['p50']} ms, p95 {lat['p95']} ms")


def _load(store: Any, eval_id: str) -> dict[str, Any]:
    check_id(eval_id, "EVAL_ID")
    view = store.view(eval_id)
    if view is None:
        fail(f"no eval with id {eval_id!r} (it may have expired)")
    return dict(view)


def _store() -> Any:
    from reactq.shared.stores.evals import EvalStore

    d = dispatcher()
    return EvalStore(d.redis, d.keys, d.settings.eval_ttl_s)


def show(
    eval_id: str = typer.Argument(..., help="the eval's id"),
    as_json: bool = typer.Option(False, "--json", help="print the eval as JSON (as GET /v1/evals/{id})"),
) -> None:
    """An eval's scores: per evaluator pass rate and mean, cost, tokens, latency; failing cases."""
    store = _store()
    view = _load(store, eval_id)
    if as_json:
        print_json(view)
        return
    print_view(view)
    failing = [r for r in store.case_records(eval_id) if not r.get("passed")]
    for rec in failing[:20]:
        why = "; ".join(f"{n}: {s.get('reason') or 'failed'}" for n, s in rec["scores"].items() if not s["passed"])
        out.print(f"  ✗ {rec['case_id']} [{rec['status']}] {why or rec.get('error') or ''}"[:300])
    if len(failing) > 20:
        out.print(f"  … and {len(failing) - 20} more")


def compare(
    a: str = typer.Argument(..., help="the earlier eval"),
    b: str = typer.Argument(..., help="the later eval"),
    as_json: bool = typer.Option(False, "--json", help="print the comparison as JSON"),
) -> None:
    """Per case what changed between two evals, by evaluator, and the aggregate deltas (b − a)."""
    from reactq.shared.evals.report import compare as diff

    store = _store()
    va, vb = _load(store, a), _load(store, b)
    got = diff(va, store.case_records(a), vb, store.case_records(b))
    if as_json:
        print_json(got)
        return
    deltas = got["deltas"]
    out.print(f"pass rate {_pct(va['pass_rate'])} → {_pct(vb['pass_rate'])}; "
              f"cost {_money(va['cost_usd'])} → {_money(vb['cost_usd'])}")
    for name, dl in deltas["scores"].items():
        pr = "-" if dl["pass_rate"] is None else f"{dl['pass_rate']:+.1%}"
        out.print(f"  {name}: pass rate {pr}")
    for label, ids in (("fixed", got["fixed"]), ("broken", got["broken"])):
        if ids:
            out.print(f"{label} ({len(ids)}): {', '.join(ids[:50])}")
    for case in got["cases"][:50]:
        changes = ", ".join(f"{n} {_v(c['a'])}→{_v(c['b'])}" for n, c in case["scores"].items())
        out.print(f"  {case['case_id']}: {changes or case['status']['a'] + '→' + case['status']['b']}")


def _v(score: dict[str, Any] | None) -> str:
    return "-" if score is None else f"{score['value']:g}"
