"""Batch routes: ``POST /v1/batches`` (JSON ``{requests, concurrency}`` or JSONL) and progress.

A batch is driven by a thread of the gateway's batch pool (never the default executor, which
the probes and other routes need); bad lines become ``invalid`` results, not a refusal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from reactq.dispatcher.approvals import waiting_lines
from reactq.dispatcher.batch.items import mark_duplicates, parse_obj, parse_text
from reactq.dispatcher.http.errors import field_error, not_found, responses
from reactq.dispatcher.http.auth import BatchRead, Caller, need
from reactq.dispatcher.http.gateway import CursorQuery, GatewayDep, LimitQuery
from reactq.dispatcher.http.middleware import LINE_TYPES
from reactq.shared.errors import Forbidden, RequestError
from reactq.shared.inputs import decode_utf8
from reactq.shared.api.dags import BatchCreated, BatchPage, BatchStatus, BatchStatusName
from reactq.shared.requests import RunRequest, WebhookSpec
from reactq.shared.stores.listing import batch_index, batch_row
from reactq.shared.service.webhooks import check_webhook

router = APIRouter(tags=["batches"])

JSONL_TYPES = LINE_TYPES


class BatchIn(BaseModel):
    """Many runs at once (JSON); the same as a JSONL body of one ``RunRequest`` per line."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    requests: list[Any] = Field(..., min_length=1, max_length=100_000)
    """One ``RunRequest`` each (a bad one becomes an ``invalid`` result; the others run)."""
    concurrency: StrictInt = Field(8, ge=1, le=1000)
    """Runs in flight at most."""
    token_budget: StrictInt | None = Field(None, ge=1)
    """The batch's cap on tokens: lines not started once it is reached end ``skipped``."""
    cost_budget_usd: float | None = Field(None, gt=0, le=1_000_000)
    """The batch's cap in dollars on its runs' spend (every line's model must have a price)."""
    webhook: WebhookSpec | None = None
    """POST a signed ``batch.done`` message here when the batch ends."""


@router.post("/v1/batches", status_code=202, response_model=BatchCreated,
             responses=responses(413, 415), openapi_extra={"requestBody": {
    "required": True, "content": {
        "application/json": {"schema": BatchIn.model_json_schema()},
        "application/x-ndjson": {"schema": {"type": "string", "description": "one RunRequest per line"}},
    }}})
async def create_batch(request: Request, gw: GatewayDep, caller: Annotated[Caller, need("batches:write")],
                       concurrency: int = Query(8, ge=1, le=1000),
                       token_budget: int | None = Query(None, ge=1),
                       cost_budget_usd: float | None = Query(None, gt=0, le=1_000_000)) -> Any:
    """Many runs at once, at most ``concurrency`` in flight; bad lines become ``invalid`` results."""
    raw = await request.body()
    ctype = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    d = gw.dispatcher
    # Parsing validates every line against the registries: blocking work, off the loop.
    parsed = await asyncio.to_thread(parse_batch, raw, ctype in JSONL_TYPES, d.validate)
    if isinstance(parsed, JSONResponse):
        return parsed
    items, body_concurrency, body_budget, body_cost, webhook = parsed
    if webhook is not None:
        try:
            await asyncio.to_thread(check_webhook, webhook, gw.settings)
        except RequestError as exc:
            return field_error(exc.field, str(exc))
    concurrency = body_concurrency or concurrency
    cost_cap = body_cost or cost_budget_usd
    items = mark_duplicates(items)
    if (refused := await asyncio.to_thread(_refused, d, items, caller, cost_cap)) is not None:
        return refused
    store = gw.batches
    batch_id = await asyncio.to_thread(store.create, items, concurrency, body_budget or token_budget,
                                       tenant=caller.tenant, cost_budget_usd=cost_cap,
                                       webhook=webhook.model_dump(mode="json") if webhook else None)
    await asyncio.to_thread(store.claim, batch_id, gw.holder)
    gw.start_batch(batch_id)
    return {"batch_id": batch_id, "status_url": f"/v1/batches/{batch_id}", "total": len(items),
            "invalid": [{"line": it.line, "id": it.id, "error": it.error} for it in items if it.error]}


@router.get("/v1/batches", response_model=BatchPage)
async def list_batches(gw: GatewayDep, caller: Annotated[Caller, need("runs:read")],
                       status: Annotated[BatchStatusName | None, Query()] = None,
                       limit: LimitQuery = 50, cursor: CursorQuery = None) -> Any:
    """HTTP batches, newest first, filtered by status, a page at a time (cursors as for runs);
    an admin key lists every tenant's, any other key its own tenant's."""
    index = batch_index(gw.dispatcher.redis, gw.keys, gw.settings.run_ttl_seconds)
    page = await asyncio.to_thread(index.page, status=status, limit=limit, cursor=cursor,
                                   tenant=None if caller.admin else caller.tenant)
    return BatchPage(batches=[batch_row(r) for r in page["rows"]], next_cursor=page["next_cursor"])


@router.get("/v1/batches/{batch_id}", response_model=BatchStatus, responses=responses(404))
def get_batch(batch_id: BatchRead, gw: GatewayDep,
              results: bool = Query(False, description="include the result lines")) -> Any:
    """Progress: done / succeeded / failed / invalid / running (of which ``waiting`` for a
    person's approval) / queued, tokens."""
    view = gw.batches.view(batch_id, with_results=results)
    if view is None:
        return not_found(f"no batch with id {batch_id!r} (it may have expired)")
    if view["running"]:
        view["waiting"] = waiting_lines(gw.dispatcher.redis, gw.keys, batch_id)
    else:
        view["waiting"] = 0
    return view


def _refused(d: Any, items: list[Any], caller: Caller, cost_cap: float | None) -> JSONResponse | None:
    """The door's checks of the lines up front (``Door.check_batch``): a scope a line needs
    (403, raised), a dollar cap over a model with no price (422: the cap would not hold)."""
    try:
        d.door.check_batch([it.request for it in items if it.request is not None], tenant=caller.tenant,
                           caller=caller, batch_cap=cost_cap)
    except Forbidden:
        raise
    except RequestError as exc:
        return field_error(exc.field, str(exc))
    return None


def parse_batch(raw: bytes, jsonl: bool, validate: Callable[[RunRequest], object]) -> Any:
    """A batch body → (items, concurrency, token budget, dollar budget and webhook from the body
    or None), or a 422."""
    if jsonl:
        try:
            lines = decode_utf8(raw).splitlines()
        except RequestError as exc:
            return field_error(None, f"the JSONL body {exc}")
        items = [parse_text(t, n, validate) for n, t in enumerate(lines, 1) if t.strip()]
        return (items, None, None, None, None) if items else field_error(None, "the JSONL body has no lines")
    try:
        body = BatchIn.model_validate_json(raw)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]) from exc
    return ([parse_obj(obj, n, validate) for n, obj in enumerate(body.requests, 1)], body.concurrency,
            body.token_budget, body.cost_budget_usd, body.webhook)
