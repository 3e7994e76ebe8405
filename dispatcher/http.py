"""The HTTP + SSE gateway (``reactq serve``): FastAPI on uvicorn.

Serve it with ``reactq serve`` or ``uvicorn reactq.dispatcher.http:app`` (``app`` is built on first
access, so importing this module has no side effects) or
``uvicorn --factory reactq.dispatcher.http:create_app``.

Routes (DESIGN.md "HTTP gateway"):

* ``POST /v1/runs`` — a ``RunRequest`` → 202 ``{run_id, events_url, status_url, created}``
  (``created`` is false when an ``idempotency_key`` matched an existing run). Bad input →
  422 ``{"detail": [{"loc": ["body", field], "msg": …}]}``; a body over
  ``REACTQ_MAX_BODY_BYTES`` → 413 (from ``Content-Length``, and counted while reading, for
  chunked bodies).
* ``GET /v1/runs/{id}`` — status, timestamps, result. ``GET /v1/runs/{id}/events`` — SSE:
  ``id:`` = Redis stream id, ``event:`` = channel, ``data:`` = JSON; resumes after the
  ``Last-Event-ID`` header (or ``?after=``); a ``: keepalive`` comment after 15 s of silence
  (``REACTQ_SSE_KEEPALIVE``); the response ends after ``done``.
* ``POST /v1/runs/{id}/interrupts`` ``{content}`` → 202 ``{id}`` (409 once the run ended);
  ``POST /v1/runs/{id}/cancel`` → 202.
* ``POST /v1/batches`` (JSON ``{requests, concurrency}`` or a JSONL body) → 202;
  ``GET /v1/batches/{id}`` progress (``?results=true`` adds the result lines).
* ``GET /healthz`` (never needs the token) · ``GET /metrics`` · ``GET /openapi.json``.

``REACTQ_API_TOKEN`` set ⇒ every route but ``/healthz`` needs ``Authorization: Bearer <token>``.

Blocking work (submitting, Celery pings) runs in the thread pool; event streams are read with
``redis.asyncio``, so a thousand idle SSE clients do not hold a thousand threads.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from functools import cached_property
from typing import Any

import redis
import redis.asyncio as aioredis
from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field, ValidationError

from reactq.dispatcher.batch import BatchStore, drive_stored_batch, holder_name, mark_duplicates, parse_obj, parse_text
from reactq.dispatcher.client import Dispatcher
from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.errors import ConfigError, RequestError, RunNotFound
from reactq.shared.events import Event
from reactq.shared.redisconn import broker_url, redis_url
from reactq.shared.requests import RunRequest
from reactq.shared.settings import Settings

log = logging.getLogger("reactq.http")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

STREAM_ID = re.compile(r"^\d+(-\d+)?$")
DEFAULT_KEEPALIVE = 15.0


# ----------------------------------------------------------------------------- middleware


async def _send_json(send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": data})


class BodyLimit:
    """413 for bodies over ``limit`` bytes: at once from ``Content-Length``, and while
    reading for chunked bodies (the app is then told the client went away, and whatever it
    answers is dropped: the 413 was already sent)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    def _too_large(self) -> dict[str, Any]:
        return {"detail": f"request body is larger than {self.limit} bytes (REACTQ_MAX_BODY_BYTES)"}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await _send_json(send, 413, self._too_large())
            return
        seen = 0
        refused = False

        async def limited_receive() -> Message:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    refused = True
                    await _send_json(send, 413, self._too_large())
                    return {"type": "http.disconnect"}
            return msg

        async def guarded_send(msg: Message) -> None:
            if not refused:
                await send(msg)

        await self.app(scope, limited_receive, guarded_send)


class BearerAuth:
    """Every route but ``/healthz`` needs ``Authorization: Bearer <token>``."""

    OPEN = ("/healthz",)

    def __init__(self, app: ASGIApp, token: Any) -> None:
        self.app = app
        # Settings may hold the token as a pydantic SecretStr (kept out of reprs and logs).
        raw = token.get_secret_value() if hasattr(token, "get_secret_value") else str(token)
        self.token = raw.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.OPEN:
            await self.app(scope, receive, send)
            return
        auth = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, given = auth.partition(b" ")
        # compare_digest: the time taken must not reveal how much of the token matched.
        if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self.token):
            await _send_json(send, 401, {"detail": "missing or invalid bearer token (REACTQ_API_TOKEN)"},
                             [(b"www-authenticate", b"Bearer")])
            return
        await self.app(scope, receive, send)


# ----------------------------------------------------------------------------- models


class RunCreated(BaseModel):
    run_id: str
    events_url: str
    status_url: str
    created: bool


class InterruptIn(BaseModel):
    content: str = Field(..., min_length=1, max_length=100_000)


class BatchIn(BaseModel):
    requests: list[Any] = Field(..., min_length=1, max_length=100_000)
    concurrency: int = Field(8, ge=1, le=1000)
    token_budget: int | None = Field(None, ge=1)


def field_error(field: str | None, msg: str) -> JSONResponse:
    """The same shape FastAPI uses for validation errors, so clients parse one format."""
    loc = ["body", field] if field else ["body"]
    return JSONResponse({"detail": [{"type": "value_error", "loc": loc, "msg": msg}]}, status_code=422)


def not_found(exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=404)


# ----------------------------------------------------------------------------- gateway


class Gateway:
    """What the routes share: settings, the sync dispatcher, the async Redis client."""

    def __init__(self, settings: Settings, keepalive: float) -> None:
        self.settings = settings
        self.keepalive = keepalive
        self.dispatcher = Dispatcher(settings)
        self._aredis: aioredis.Redis | None = None
        self.stop = threading.Event()
        self.tasks: set[asyncio.Task[None]] = set()
        self.holder = holder_name()

    @property
    def keys(self) -> Any:
        return self.dispatcher.keys

    @property
    def aredis(self) -> aioredis.Redis:
        if self._aredis is None:
            self._aredis = aioredis.Redis.from_url(redis_url(self.settings))
        return self._aredis

    @cached_property
    def batches(self) -> BatchStore:
        return BatchStore(self.dispatcher.redis, self.keys, self.settings.run_ttl_seconds)

    async def run_status(self, run_id: str) -> str | None:
        raw = await self.aredis.hget(self.keys.run(run_id), "status")
        return None if raw is None else raw.decode()

    def start_batch(self, batch_id: str) -> None:
        """Drive a batch in a thread; the task set keeps a reference until it ends."""
        task = asyncio.get_running_loop().create_task(asyncio.to_thread(
            drive_stored_batch, self.dispatcher, self.batches, batch_id, self.holder, self.stop))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def resume_batches(self) -> None:
        """Drive the batches left running by a gateway that went away (lease expired)."""
        for batch_id in await asyncio.to_thread(self._claim_unfinished):
            log.info("resuming batch %s", batch_id)
            self.start_batch(batch_id)

    def _claim_unfinished(self) -> list[str]:
        store = self.batches
        return [b for b in store.unfinished() if store.claim(b, self.holder)]

    async def close(self) -> None:
        self.stop.set()
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=5)
        if self._aredis is not None:
            await self._aredis.aclose()


async def sse_stream(gw: Gateway, run_id: str, cursor: str | None) -> AsyncIterator[str]:
    """Frames after ``cursor`` until ``done``; a keep-alive comment after each quiet spell."""
    key = gw.keys.run_events(run_id)
    block_ms = max(1, int(gw.keepalive * 1000))
    while True:
        res = await gw.aredis.xread({key: cursor or "0-0"}, block=block_ms, count=500)
        entries = res[0][1] if res else []
        for raw_id, fields in entries:
            cursor = raw_id.decode()
            event = Event.from_fields(fields)
            yield event.sse(cursor)
            if event.channel == "done":
                return
        if not entries:
            status = await gw.run_status(run_id)
            # Ended (its done event was before the cursor) or expired: nothing more will come.
            if status is None or status in TERMINAL_STATUSES:
                return
            yield ": keepalive\n\n"


async def sse_backlog_then_live(gw: Gateway, run_id: str, cursor: str | None) -> AsyncIterator[str]:
    """For an ended run, read what is left without blocking (no 15 s wait before closing)."""
    if await gw.run_status(run_id) in TERMINAL_STATUSES:
        entries = await gw.aredis.xrange(gw.keys.run_events(run_id), min=f"({cursor}" if cursor else "-")
        for raw_id, fields in entries:
            yield Event.from_fields(fields).sse(raw_id.decode())
        return
    async for frame in sse_stream(gw, run_id, cursor):
        yield frame


def _register_runs(app: FastAPI, gw: Gateway) -> None:
    d = gw.dispatcher

    @app.post("/v1/runs", status_code=202, response_model=RunCreated, tags=["runs"])
    def create_run(req: RunRequest) -> Any:
        """Validate and enqueue a run."""
        try:
            handle = d.submit(req)
        except RequestError as exc:
            return field_error(exc.field, str(exc))
        except ValidationError as exc:
            raise RequestValidationError(exc.errors(include_url=False)) from exc
        base = f"/v1/runs/{handle.run_id}"
        return RunCreated(run_id=handle.run_id, events_url=f"{base}/events", status_url=base,
                          created=handle.created)

    @app.get("/v1/runs/{run_id}", tags=["runs"])
    def get_run(run_id: str) -> Any:
        """Status, timestamps, number of events published, and the result once ended."""
        try:
            return d.store.status(run_id)
        except RunNotFound as exc:
            return not_found(exc)

    @app.get("/v1/runs/{run_id}/events", tags=["runs"], response_class=StreamingResponse,
             responses={200: {"content": {"text/event-stream": {}}}})
    async def run_events(run_id: str, after: str | None = Query(None, description="resume after this stream id"),
                         last_event_id: str | None = Header(None)) -> Any:
        """Server-sent events; reconnect with ``Last-Event-ID`` to get exactly what was missed."""
        cursor = last_event_id or after  # the header is the newer position on a reconnect
        if cursor is not None and not STREAM_ID.match(cursor):
            return JSONResponse({"detail": [{"type": "value_error", "loc": ["header", "last-event-id"],
                                             "msg": f"not a stream id: {cursor!r}"}]}, status_code=422)
        if await gw.run_status(run_id) is None:
            return not_found(RunNotFound(f"no run with id {run_id!r} (it may have expired)"))
        return StreamingResponse(sse_backlog_then_live(gw, run_id, cursor), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.post("/v1/runs/{run_id}/interrupts", status_code=202, tags=["runs"])
    def interrupt_run(run_id: str, body: InterruptIn) -> Any:
        """A follow-up message, taken into the run at its next drain point."""
        try:
            status = d.store.status(run_id)["status"]
        except RunNotFound as exc:
            return not_found(exc)
        if status in TERMINAL_STATUSES:
            return JSONResponse({"detail": f"run {run_id} has already ended ({status})"}, status_code=409)
        try:
            return {"id": d.handle(run_id).interrupt(body.content)}
        except RequestError as exc:
            if exc.field == "run_id":
                return JSONResponse({"detail": str(exc)}, status_code=409)
            return field_error(exc.field, str(exc))

    @app.post("/v1/runs/{run_id}/cancel", status_code=202, tags=["runs"])
    def cancel_run(run_id: str) -> Any:
        """Stop the run at its next step boundary (it ends ``cancelled``); no-op once ended."""
        try:
            handle = d.handle(run_id)
            handle.cancel()
            return {"run_id": run_id, "status": handle.status()["status"]}
        except RunNotFound as exc:
            return not_found(exc)


def _register_batches(app: FastAPI, gw: Gateway) -> None:
    d = gw.dispatcher
    jsonl_types = ("application/x-ndjson", "application/jsonl", "application/x-jsonlines", "text/plain")

    @app.post("/v1/batches", status_code=202, tags=["batches"], openapi_extra={"requestBody": {
        "required": True, "content": {
            "application/json": {"schema": BatchIn.model_json_schema()},
            "application/x-ndjson": {"schema": {"type": "string", "description": "one RunRequest per line"}},
        }}})
    async def create_batch(request: Request, concurrency: int = Query(8, ge=1, le=1000),
                           token_budget: int | None = Query(None, ge=1)) -> Any:
        """Many runs at once, at most ``concurrency`` in flight; bad lines become ``invalid`` results."""
        raw = await request.body()
        ctype = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
        # Parsing validates every line against the registries: blocking work, off the loop.
        parsed = await asyncio.to_thread(_parse_batch, raw, ctype in jsonl_types, d.validate)
        if isinstance(parsed, JSONResponse):
            return parsed
        items, body_concurrency, body_budget = parsed
        concurrency = body_concurrency or concurrency
        items = mark_duplicates(items)
        store = gw.batches
        batch_id = await asyncio.to_thread(store.create, items, concurrency, body_budget or token_budget)
        await asyncio.to_thread(store.claim, batch_id, gw.holder)
        gw.start_batch(batch_id)
        return {"batch_id": batch_id, "status_url": f"/v1/batches/{batch_id}", "total": len(items),
                "invalid": [{"line": it.line, "id": it.id, "error": it.error} for it in items if it.error]}

    @app.get("/v1/batches/{batch_id}", tags=["batches"])
    def get_batch(batch_id: str, results: bool = Query(False, description="include the result lines")) -> Any:
        """Progress: done / succeeded / failed / invalid / running / queued, tokens."""
        view = gw.batches.view(batch_id, with_results=results)
        if view is None:
            return not_found(RunNotFound(f"no batch with id {batch_id!r} (it may have expired)"))
        return view


def _parse_batch(raw: bytes, jsonl: bool, validate: Callable[[RunRequest], None]) -> Any:
    """A batch body → (items, concurrency from the body or None), or a 422 response."""
    if jsonl:
        lines = raw.decode("utf-8", "replace").splitlines()
        items = [parse_text(t, n, validate) for n, t in enumerate(lines, 1) if t.strip()]
        return (items, None, None) if items else field_error(None, "the JSONL body has no lines")
    try:
        body = BatchIn.model_validate_json(raw)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]) from exc
    return ([parse_obj(obj, n, validate) for n, obj in enumerate(body.requests, 1)], body.concurrency,
            body.token_budget)


async def _healthz(gw: Gateway) -> JSONResponse:
    """Redis, broker, workers. 503 when Redis or the broker is unreachable."""
    out: dict[str, Any] = {"redis": "ok", "broker": "ok", "workers": []}
    try:
        await asyncio.wait_for(gw.aredis.ping(), timeout=2)
    except (redis.RedisError, OSError, asyncio.TimeoutError) as exc:
        out.update(status="unavailable", redis=f"error: {exc}", broker="unknown")
        return JSONResponse(out, status_code=503)
    if not await asyncio.to_thread(_broker_ok, gw.settings):
        out.update(status="unavailable", broker="error: unreachable")
        return JSONResponse(out, status_code=503)
    try:
        out["workers"] = sorted(await asyncio.wait_for(
            asyncio.to_thread(gw.dispatcher.workers_seen, 0.5), timeout=3))
    except Exception as exc:  # a ping problem is reported, not fatal: Redis is up
        out["workers_error"] = str(exc)
    out["status"] = "ok" if out["workers"] else "degraded"
    return JSONResponse(out)


def _broker_ok(settings: Settings) -> bool:
    url = broker_url(settings)
    if url == redis_url(settings):
        return True  # already pinged
    from kombu import Connection

    try:
        with Connection(url, connect_timeout=2) as conn:
            conn.ensure_connection(max_retries=1)
        return True
    except Exception:
        return False


def _register_ops(app: FastAPI, gw: Gateway) -> None:
    @app.get("/healthz", tags=["ops"])
    async def healthz() -> Any:
        return await _healthz(gw)

    from reactq.dispatcher import metrics

    @app.get("/metrics", tags=["ops"], response_class=Response)
    async def get_metrics() -> Any:
        """Prometheus exposition (``reactq.dispatcher.metrics.render``)."""
        body, content_type = await asyncio.to_thread(metrics.render, gw.settings)
        return Response(body, media_type=content_type)


async def _redis_down(_: Request, exc: Exception) -> JSONResponse:
    """Redis unreachable is the service's problem, not the caller's: 503, not a bare 500."""
    return JSONResponse({"detail": f"Redis is unreachable: {exc}"}, status_code=503)


def create_app(settings: Settings | None = None, *, keepalive: float | None = None) -> FastAPI:
    """The gateway app. ``keepalive`` defaults to ``REACTQ_SSE_KEEPALIVE`` or 15 s."""
    settings = settings or Settings()
    if keepalive is None:
        keepalive = float(os.environ.get("REACTQ_SSE_KEEPALIVE", DEFAULT_KEEPALIVE))
    gw = Gateway(settings, keepalive)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            await gw.resume_batches()
        except (redis.RedisError, OSError, ConfigError) as exc:
            log.warning("could not look for unfinished batches: %s", exc)
        yield
        await gw.close()

    app = FastAPI(title="reactq", version="0.1.0", lifespan=lifespan,
                  description="ReAct agents as durable distributed jobs: runs, their SSE event streams, batches.")
    app.state.gateway = gw
    app.add_exception_handler(redis.ConnectionError, _redis_down)
    _register_runs(app, gw)
    _register_batches(app, gw)
    _register_ops(app, gw)
    from reactq.dispatcher import dag_http

    app.include_router(dag_http.router)
    from reactq.dispatcher import flow_http

    app.include_router(flow_http.router)
    # Outermost first: auth refuses before a large body is read at all.
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    if settings.api_token:
        app.add_middleware(BearerAuth, token=settings.api_token)
    return app


_app: FastAPI | None = None


def __getattr__(name: str) -> Any:
    """``reactq.dispatcher.http:app`` for uvicorn, built on first access (no work at import)."""
    global _app
    if name == "app":
        if _app is None:
            _app = create_app()
        return _app
    raise AttributeError(name)


__all__ = ["create_app", "Gateway", "BodyLimit", "BearerAuth"]
