"""``/v1/responses``: OpenAI's Responses API over reactq runs, for the official ``openai`` client.

``POST /v1/responses`` makes a run (``door.create_run``, the path ``POST /v1/runs`` takes) and
answers: with ``stream``, server-sent Responses events; with ``background``, at once
(``queued``); else when the run ended or waits for a person (``incomplete``, with the
``mcp_approval_request`` item to answer). ``input: [{type: "mcp_approval_response", …}]`` with
``previous_response_id`` decides that response's pending approvals (scope ``approvals:write``)
and answers with that same response, which goes on. ``GET /v1/responses/{id}`` (``?stream=true
&starting_after=N`` resumes the event stream after sequence number N) and ``POST
/v1/responses/{id}/cancel``. Request and shapes: ``responses_in``, ``responses_shape``; errors
are OpenAI-shaped here (``responses_errors``).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from reactq.dispatcher.http.auth import caller_of, owned
from reactq.dispatcher.http.errors import conflict
from reactq.dispatcher.http.gateway import Gateway, GatewayDep
from reactq.dispatcher.http.responses_errors import OPENAI_ERRORS
from reactq.dispatcher.http.responses_in import ResponseCreate, approval_answers, run_request
from reactq.dispatcher.http.responses_shape import STRIDE, ItemBook, response_object, run_id_of
from reactq.dispatcher.http.sse import SSE_HEADERS
from reactq.dispatcher.protocols.door import ScopeMissing, create_run
from reactq.dispatcher.protocols.runview import RunView
from reactq.dispatcher.threads import ThreadBusy
from reactq.shared.api.responses import ResponseObject as ResponseModel
from reactq.shared.errors import ApprovalConflict, RunNotFound
from reactq.shared.inputs import ID_PATTERN, ID_RE
from reactq.shared.requests import RunRequest
from reactq.shared.stores.records import run_record

router = APIRouter(tags=["responses"])

#: Seconds ``cancel`` waits for the run to reach its end before answering.
CANCEL_WAIT_S = 5.0
ResponseObject = dict[str, Any]
#: A response id in a path (``resp_`` and a run id; another well-formed id is a 404).
ResponseId = Annotated[str, Path(pattern=ID_PATTERN, max_length=133, description="a response id: resp_ and the run's id")]
#: The 200 of a route that may answer the object or (``stream``) its server-sent events.
OBJECT_OR_EVENTS: dict[int | str, dict[str, Any]] = {200: {
    "description": "The response object; with `stream`, server-sent Responses events (`event:` = `data.type`, "
                   "each `data` with its `sequence_number`).",
    "content": {"text/event-stream": {"schema": {"type": "string"}}}}}


def view_of(gw: Gateway) -> RunView:
    return RunView(gw.dispatcher, gw.streams)


async def _run_of(request: Request, gw: Gateway, resp_id: str, scope: str) -> str:
    """The run of a response id the caller may act on with ``scope`` (404 otherwise)."""
    run_id = run_id_of(resp_id)
    if run_id is None or not ID_RE.fullmatch(run_id):
        raise RunNotFound(f"no response with id {resp_id[:140]!r}")
    try:
        await owned(request, gw, run_record(gw.keys, run_id), scope)
    except RunNotFound:
        raise RunNotFound(f"no response with id {resp_id!r} (it may have expired)") from None
    return run_id


async def current(view: RunView, run_id: str) -> ResponseObject:
    """The response object of a run as it stands."""
    snap = await view.snapshot(run_id)
    events = [e for _, e in await view.all_events(run_id)]
    return response_object(run_id, snap.status, snap.created_at, snap.request, snap.result, events)


def _frame(kind: str, number: int, payload: dict[str, Any]) -> str:
    data = json.dumps({"type": kind, "sequence_number": number, **payload}, ensure_ascii=False)
    return f"event: {kind}\ndata: {data}\n\n"


async def stream_frames(view: RunView, run_id: str, after: int | None, keepalive: float) -> AsyncIterator[str]:
    """The run as Responses stream events after sequence number ``after``, until it ends."""
    snap = await view.snapshot(run_id)
    start = response_object(run_id, "queued", snap.created_at, snap.request, None, [])
    first = [("response.created", {"response": start}),
             ("response.in_progress", {"response": {**start, "status": "in_progress"}})]
    for k, (kind, payload) in enumerate(first):
        if after is None or k > after:
            yield _frame(kind, k, payload)
    book, seen, quiet_since = ItemBook(run_id), [], time.monotonic()
    async for item in view.follow(run_id):
        if item is None:
            await view.snapshot(run_id)  # RunNotFound ends the stream once the run expired
            if time.monotonic() - quiet_since >= keepalive:
                quiet_since = time.monotonic()
                yield ": keepalive\n\n"
            continue
        quiet_since = time.monotonic()
        event = item[1]
        seen.append(event)
        pairs = book.feed(event)
        if event.channel == "done":
            status = str(event.data.get("status") or "failed")
            final = response_object(run_id, status, snap.created_at, snap.request, event.data, seen)
            pairs.append(("response.completed" if status == "succeeded" else "response.failed", {"response": final}))
        for k, (kind, payload) in enumerate(pairs):
            number = STRIDE * event.seq + k
            if after is None or number > after:
                yield _frame(kind, number, payload)


async def _guarded(frames: AsyncIterator[str]) -> AsyncIterator[str]:
    try:
        async for f in frames:
            yield f
    except RunNotFound:
        return


def _streamed(gw: Gateway, run_id: str, after: int | None) -> StreamingResponse:
    return StreamingResponse(_guarded(stream_frames(view_of(gw), run_id, after, gw.keepalive)),
                             media_type="text/event-stream", headers=SSE_HEADERS)


async def _answer(gw: Gateway, run_id: str, body: ResponseCreate) -> Any:
    view = view_of(gw)
    if body.stream:
        return _streamed(gw, run_id, None)
    if not body.background:
        await view.wait(run_id, {"waiting"})
    return await current(view, run_id)


@router.post("/v1/responses", response_model=ResponseModel, responses={**OBJECT_OR_EVENTS, **OPENAI_ERRORS})
async def create_response(body: ResponseCreate, request: Request, gw: GatewayDep) -> Any:
    """Make a run (or decide a response's approvals) and answer as the Responses API does."""
    answers = approval_answers(body)
    if answers:
        assert body.previous_response_id is not None
        run_id = await _run_of(request, gw, body.previous_response_id, "approvals:write")
        view = view_of(gw)
        for a in answers:
            try:
                await view.decide(run_id, a.approval_request_id, "approve" if a.approve else "reject",
                                  message=a.reason, by=caller_of(request).key_id)
            except ApprovalConflict as exc:
                return conflict(str(exc))
        return await _answer(gw, run_id, body)
    previous = None
    if body.previous_response_id is not None:
        prev = await _run_of(request, gw, body.previous_response_id, "runs:read")
        previous = (await view_of(gw).snapshot(prev)).request
    try:
        req = RunRequest.model_validate(run_request(body, previous))
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)) from exc
    try:
        handle = await create_run(gw.dispatcher, req, caller_of(request))
    except ScopeMissing as exc:
        from reactq.dispatcher.http.errors import forbidden

        return forbidden(exc.scope)
    except ThreadBusy as exc:
        return conflict(str(exc))
    return await _answer(gw, handle.run_id, body)


@router.get("/v1/responses/{response_id}", response_model=ResponseModel, responses={**OBJECT_OR_EVENTS, **OPENAI_ERRORS})
async def retrieve_response(response_id: ResponseId, request: Request, gw: GatewayDep, stream: bool = False,
                            starting_after: Annotated[int | None, Query(ge=-1)] = None) -> Any:
    """The response now; with ``stream=true`` its events (after ``starting_after``) until it ends."""
    run_id = await _run_of(request, gw, response_id, "runs:read")
    if stream:
        return _streamed(gw, run_id, starting_after)
    return await current(view_of(gw), run_id)


@router.post("/v1/responses/{response_id}/cancel", response_model=ResponseModel, responses=OPENAI_ERRORS)
async def cancel_response(response_id: ResponseId, request: Request, gw: GatewayDep) -> Any:
    """Cancel the response's run; answers the response once it ended (or after a few seconds)."""
    run_id = await _run_of(request, gw, response_id, "runs:write")
    view = view_of(gw)
    await view.cancel(run_id)
    await view.wait(run_id, (), timeout=CANCEL_WAIT_S)
    return await current(view, run_id)


