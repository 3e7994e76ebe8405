"""Fork routes: ``POST /v1/runs/{id}/fork``, ``POST /v1/batches/{id}/fork``,
``POST /v1/dags/{id}/fork``.

A fork is a new run of its parent's tenant that starts at one of the parent's turns with the
parent's history before it; its calls are answered from the parent's ledger as ``reuse`` says
(``reactq.shared.engine.recorded``). ``dry_run`` answers the plan (200) and creates nothing.
A parent that has not ended, or ``from: last_failure`` of one that did not fail → 409; another
tenant's id → 404.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from reactq.dispatcher.batch.fork import fork_batch
from reactq.dispatcher.dag_fork import fork_dag
from reactq.dispatcher.fork import fork_run
from reactq.dispatcher.http.auth import BatchWrite, DagWrite, RunWrite
from reactq.dispatcher.http.errors import responses
from reactq.dispatcher.http.gateway import GatewayDep
from reactq.shared.api.runs import ForkedFrom
from reactq.shared.fork.models import (
    BatchForked, BatchForkRequest, DagForked, DagForkRequest, ForkCreated, ForkRequest,
)

router = APIRouter(tags=["forks"])


@router.post("/v1/runs/{run_id}/fork", status_code=202, response_model=ForkCreated,
             responses={200: {"description": "A dry run: the plan; nothing was created", "model": ForkCreated},
                        **responses(404, 409, 429)})
async def fork_a_run(run_id: RunWrite, body: ForkRequest, gw: GatewayDep) -> Any:
    """Fork an ended run: a new run with the parent's history before the fork's turn."""
    try:
        forked = await asyncio.to_thread(fork_run, gw.dispatcher, run_id, body)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)) from exc
    plan = forked.plan
    if forked.handle is None:
        return JSONResponse(ForkCreated(plan=plan, forked_from=ForkedFrom(**forked.forked_from),
                                        created=False).model_dump(mode="json"), status_code=200)
    return ForkCreated(run_id=forked.handle.run_id, forked_from=ForkedFrom(**forked.forked_from), plan=plan,
                       created=forked.handle.created)




@router.post("/v1/batches/{batch_id}/fork", status_code=202, response_model=BatchForked,
             responses={200: {"description": "A dry run: the counts and plans; nothing was created",
                              "model": BatchForked}, **responses(404, 429)})
async def fork_a_batch(batch_id: BatchWrite, body: BatchForkRequest, gw: GatewayDep) -> Any:
    """A new batch: the lines whose status ``status`` names are forks of their runs, the others
    keep their run and result. The same request twice answers the same batch."""
    got = await asyncio.to_thread(fork_batch, gw.dispatcher, gw.batches, batch_id, body)
    out = BatchForked(batch_id=got.batch_id, forked_from=batch_id, forked=got.forked, kept=got.kept,
                      plans=got.plans if body.dry_run else None)
    if got.batch_id is None:
        return JSONResponse(out.model_dump(mode="json"), status_code=200)
    # A batch made by an earlier request whose gateway died before driving it is driven now
    # (the lease says whether a live gateway drives it already).
    if await asyncio.to_thread(_claim_running, gw.batches, got.batch_id, gw.holder):
        gw.start_batch(got.batch_id)
    return out


def _claim_running(store: Any, batch_id: str, holder: str) -> bool:
    view = store.view(batch_id, with_results=False)
    return bool(view is not None and view["status"] == "running" and store.claim(batch_id, holder))



@router.post("/v1/dags/{dag_id}/fork", status_code=202, response_model=DagForked, responses=responses(404, 409))
async def fork_a_dag(dag_id: DagWrite, gw: GatewayDep, body: DagForkRequest | None = None) -> Any:
    """A new DAG: the succeeded steps keep their results, each failed step runs again as a
    fork of its run (and the steps depending on it afresh), then the answer is made again.
    A DAG with no failed step → 409."""
    got = await asyncio.to_thread(fork_dag, gw.dags, dag_id)
    return DagForked(dag_id=got.dag_id, forked_from=dag_id, kept=got.kept, rerun=got.rerun)


__all__ = ["router"]
