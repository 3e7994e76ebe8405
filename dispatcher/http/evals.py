"""Eval routes: ``POST /v1/evals`` (scope ``batches:write``), ``GET /v1/evals``,
``GET /v1/evals/{id}``, ``GET /v1/evals/{id}/cases`` and ``GET /v1/evals/{a}/compare/{b}``
(its ids named ``eval_id`` and ``other_id``)
(scope ``runs:read``). Another tenant's eval is a 404, as for every object.

An eval's cases run as one batch that a thread of the gateway's batch pool drives
(``reactq.dispatcher.evals.drive``), scoring each line as its run ends.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from reactq.dispatcher.evals.create import check, parse_objects, prepare, start_eval
from reactq.dispatcher.http.auth import Caller, need, owned
from reactq.dispatcher.http.errors import field_error, responses
from reactq.dispatcher.http.gateway import CursorQuery, GatewayDep, IdPath, LimitQuery
from reactq.shared.api.evals import EvalCasePage, EvalCompare, EvalCreated, EvalIn, EvalPage, EvalView
from reactq.shared.errors import RequestError
from reactq.shared.evals.report import compare
from reactq.shared.stores.evals import eval_row
from reactq.shared.stores.records import Record

router = APIRouter(tags=["evals"])


async def _owned(request: Request, gw: Any, eval_id: str) -> str:
    await owned(request, gw, Record("eval", eval_id, gw.keys.eval(eval_id)), "runs:read")
    return eval_id


async def _eval_id(eval_id: IdPath, request: Request, gw: GatewayDep) -> str:
    return await _owned(request, gw, eval_id)


async def _other_id(other_id: IdPath, request: Request, gw: GatewayDep) -> str:
    return await _owned(request, gw, other_id)


EvalRead = Annotated[str, Depends(_eval_id)]
OtherRead = Annotated[str, Depends(_other_id)]


@router.post("/v1/evals", status_code=202, response_model=EvalCreated, responses=responses(413, 415))
async def create_eval(body: EvalIn, gw: GatewayDep, caller: Annotated[Caller, need("batches:write")]) -> Any:
    """Run every case as a line of one batch and score each finished run; bad cases are
    reported ``invalid`` and the others run."""
    got = await asyncio.to_thread(_create, gw, body, caller)
    if isinstance(got, JSONResponse):
        return got
    eval_id, batch_id, created = got
    gw.start_eval(eval_id)
    return {"eval_id": eval_id, "batch_id": batch_id, **created}


def _create(gw: Any, body: EvalIn, caller: Caller) -> Any:
    d = gw.dispatcher
    try:
        check(d, body, gw.evals, tenant=caller.tenant, admin=caller.admin)
    except RequestError as exc:
        return field_error(exc.field, str(exc))
    prepared = prepare(d, parse_objects(body.cases), body)
    try:
        eval_id, batch_id = start_eval(d, gw.evals, gw.batches, prepared, body, tenant=caller.tenant, caller=caller)
    except RequestError as exc:  # the door's checks of the lines (a Forbidden is raised: 403)
        return field_error(exc.field, str(exc))
    gw.batches.claim(batch_id, gw.holder)
    return eval_id, batch_id, {"total": len(prepared.items), "invalid": prepared.invalid}


@router.get("/v1/evals", response_model=EvalPage)
async def list_evals(gw: GatewayDep, caller: Annotated[Caller, need("runs:read")],
                     limit: LimitQuery = 50, cursor: CursorQuery = None) -> Any:
    """Evals, newest first, a page at a time; an admin key lists every tenant's."""
    page = await asyncio.to_thread(gw.evals.index.page, limit=limit, cursor=cursor,
                                   tenant=None if caller.admin else caller.tenant)
    return {"evals": [eval_row(r) for r in page["rows"]], "next_cursor": page["next_cursor"]}


@router.get("/v1/evals/{eval_id}", response_model=EvalView, responses=responses(404))
def get_eval(eval_id: EvalRead, gw: GatewayDep) -> Any:
    """The eval's counts, per-evaluator pass rate and mean, cost (the judge's apart), latency."""
    return gw.evals.view(eval_id)


@router.get("/v1/evals/{eval_id}/cases", response_model=EvalCasePage, responses=responses(404))
def eval_cases(eval_id: EvalRead, gw: GatewayDep, limit: LimitQuery = 100, cursor: CursorQuery = None) -> Any:
    """The scored cases in the dataset's order, a page at a time (``cursor``: the last line seen)."""
    try:
        after = int(cursor) if cursor else 0
    except ValueError:
        return field_error("cursor", "cursor must be the next_cursor of the previous page", where="query")
    recs = [r for r in gw.evals.case_records(eval_id) if int(r["line"]) > after]
    page = recs[:limit]
    return {"cases": page, "next_cursor": str(page[-1]["line"]) if len(recs) > limit else None}


@router.get("/v1/evals/{eval_id}/compare/{other_id}", response_model=EvalCompare, responses=responses(404))
def compare_evals(eval_id: EvalRead, other_id: OtherRead, gw: GatewayDep) -> Any:
    """Per case what changed from the eval ``eval_id`` (a) to ``other_id`` (b), by evaluator,
    the cases that flipped (``fixed``, ``broken``), and the aggregate deltas (b − a)."""
    a, b = eval_id, other_id
    store = gw.evals
    return compare(store.view(a) or {}, store.case_records(a), store.view(b) or {}, store.case_records(b))
