"""``reactq.AsyncClient``: ``reactq.Client`` with ``await`` and ``async for``.

    async with reactq.AsyncClient("http://gateway:8000", api_key="rq_…") as client:
        run = await client.runs.create(query="what is 17*23?")
        async for event in client.runs.stream(run.run_id):
            print(event.event, event.data)
"""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx2

from reactq.dispatcher.api_client import _http, routes
from reactq.dispatcher.api_client._core import Call, Resume, SSEDecoder, backoff
from reactq.dispatcher.api_client.errors import APIError
from reactq.dispatcher.api_client.models import (
    ApiKey,
    ApiKeyList,
    Approval,
    ApprovalList,
    Batch,
    BatchFork,
    BatchList,
    Dag,
    DagFork,
    DagList,
    Eval,
    EvalCases,
    EvalComparison,
    EvalList,
    Interrupt,
    Fork,
    Run,
    RunList,
    Schedule,
    ScheduleList,
    StreamEvent,
    Thread,
)
from reactq.dispatcher.api_client.routes import Body

T = TypeVar("T")


class AsyncClient:
    """The gateway's HTTP API for asyncio; the options are ``Client``'s."""

    def __init__(self, base_url: str, api_key: str | None = None, *,
                 timeout: float | httpx2.Timeout = _http.DEFAULT_TIMEOUT, max_retries: int = 2,
                 reconnect_s: float = 60.0, http_client: httpx2.AsyncClient | None = None) -> None:
        opts = _http.options(base_url, api_key, timeout)
        self._http = http_client or httpx2.AsyncClient(**opts)
        self._stream_timeout = _http.stream_timeout(opts["timeout"])
        self.max_retries = max_retries
        self.reconnect_s = reconnect_s
        self.runs = AsyncRuns(self)
        self.dags = AsyncDags(self)
        self.batches = AsyncBatches(self)
        self.threads = AsyncThreads(self)
        self.approvals = AsyncApprovals(self)
        self.schedules = AsyncSchedules(self)
        self.keys = AsyncKeys(self)
        self.evals = AsyncEvals(self)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.aclose()

    async def call(self, call: Call[T]) -> T:
        """Send ``call``, retrying where safe; its parsed answer or an ``APIError``."""
        attempt = 0
        while True:
            attempt += 1
            cause: httpx2.TransportError | None = None
            try:
                res = await self._http.request(call.method, call.path, params=call.query(), json=call.json)
                if not res.is_error:
                    return _http.parse(call, res)
                error: APIError = _http.error_of(res)
            except httpx2.TransportError as exc:
                cause, error = exc, _http.transport_error(exc)
            if attempt > self.max_retries or not _http.retryable(call, error, cause):
                raise error
            await asyncio.sleep(backoff(attempt, retry_after=error.retry_after))

    async def stream(self, path: str, last_event_id: str | None = None) -> AsyncIterator[StreamEvent]:
        """Events of ``path`` until ``done``, reconnecting with ``Last-Event-ID``."""
        resume = Resume(last_event_id, self.reconnect_s)
        decoder = SSEDecoder()
        while True:
            try:
                async with self._http.stream("GET", path, headers=resume.headers(),
                                             timeout=self._stream_timeout) as res:
                    if res.is_error:
                        await res.aread()
                        raise _http.error_of(res)
                    async for line in res.aiter_lines():
                        event = decoder.feed(line)
                        if event is None:
                            continue
                        resume.got(event)
                        yield event
                        if event.event == "done":
                            return
                failure: Exception = _http.transport_error(httpx2.RemoteProtocolError("the stream ended before done"))
            except httpx2.TransportError as exc:
                failure = _http.transport_error(exc)
            except APIError as exc:
                if exc.status_code not in (502, 503, 504):
                    raise
                failure = exc
            await asyncio.sleep(resume.wait_before_retry(time.monotonic(), decoder.retry_ms, failure))


class _Resource:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client


class AsyncRuns(_Resource):
    async def create(self, request: Body = None, /, **fields: Any) -> Run:
        run = await self._c.call(routes.create_run(request, fields))
        if run.status is not None:
            return run
        current = await self.get(run.run_id)
        return current.model_copy(update=run.model_dump(exclude_unset=True, exclude={"status"}))

    async def get(self, run_id: str) -> Run:
        return await self._c.call(routes.get_run(run_id))

    async def list(self, *, status: str | None = None, batch_id: str | None = None,
                   thread_id: str | None = None, limit: int | None = None, cursor: str | None = None,
                   **filters: Any) -> RunList:
        return await self._c.call(routes.list_runs(status, batch_id, thread_id, limit, cursor, filters))

    def stream(self, run_id: str, last_event_id: str | None = None) -> AsyncIterator[StreamEvent]:
        return self._c.stream(routes.run_events_path(run_id), last_event_id)

    async def wait(self, run_id: str, *, timeout: float | None = None, poll: float = 0.05) -> Run:
        """The run once it ended (``TimeoutError`` after ``timeout`` s)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not (run := await self.get(run_id)).done:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} still {run.status} after {timeout}s")
            await asyncio.sleep(poll)
            poll = min(1.0, poll * 1.5)
        return run

    async def cancel(self, run_id: str) -> Run:
        return await self._c.call(routes.cancel_run(run_id))

    async def interrupt(self, run_id: str, content: str) -> Interrupt:
        return await self._c.call(routes.interrupt_run(run_id, content))

    async def approvals(self, run_id: str) -> builtins.list[Approval]:
        return await self._c.call(routes.run_approvals(run_id))


    async def fork(self, run_id: str, *, from_: str | int | None = None, edit: dict[str, Any] | None = None,
             reuse: str | None = None, dry_run: bool = False, idempotency_key: str | None = None,
             webhook: dict[str, Any] | None = None) -> Fork:
        """Fork an ended run from ``from_`` (``last_failure``, ``last_turn`` or a turn number);
        ``dry_run``: the plan only, nothing created."""
        fields = dict(edit=edit, reuse=reuse, dry_run=dry_run or None, idempotency_key=idempotency_key,
                      webhook=webhook)
        return await self._c.call(routes.fork_run(run_id, from_, fields))

class AsyncDags(_Resource):
    async def create(self, request: Body = None, /, **fields: Any) -> Dag:
        return await self._c.call(routes.create_dag(request, fields))

    async def get(self, dag_id: str) -> Dag:
        return await self._c.call(routes.get_dag(dag_id))

    async def list(self, *, status: str | None = None, limit: int | None = None,
                   cursor: str | None = None) -> DagList:
        return await self._c.call(routes.list_dags(status, limit, cursor))

    def stream(self, dag_id: str, last_event_id: str | None = None) -> AsyncIterator[StreamEvent]:
        return self._c.stream(routes.dag_events_path(dag_id), last_event_id)

    async def cancel(self, dag_id: str) -> Dag:
        return await self._c.call(routes.cancel_dag(dag_id))

    async def interrupt(self, dag_id: str, content: str) -> Interrupt:
        return await self._c.call(routes.interrupt_dag(dag_id, content))


    async def fork(self, dag_id: str) -> DagFork:
        """A new DAG: succeeded steps kept, failed steps re-run as forks of their runs."""
        return await self._c.call(routes.fork_dag(dag_id))

class AsyncBatches(_Resource):
    async def create(self, requests: Sequence[Any], *, concurrency: int | None = None,
                     token_budget: int | None = None) -> Batch:
        return await self._c.call(routes.create_batch(requests, concurrency, token_budget))

    async def get(self, batch_id: str, *, results: bool = False) -> Batch:
        return await self._c.call(routes.get_batch(batch_id, results))

    async def list(self, *, status: str | None = None, limit: int | None = None,
                   cursor: str | None = None) -> BatchList:
        return await self._c.call(routes.list_batches(status, limit, cursor))

    async def cancel(self, batch_id: str) -> Batch:
        return await self._c.call(routes.cancel_batch(batch_id))


    async def fork(self, batch_id: str, *, status: builtins.list[str] | None = None, from_: str | int | None = None,
             reuse: str | None = None, edit: dict[str, Any] | None = None, dry_run: bool = False) -> BatchFork:
        """A new batch: lines of ``status`` (default failed) forked from their runs, the others kept."""
        fields = dict(status=status, reuse=reuse, edit=edit, dry_run=dry_run or None)
        return await self._c.call(routes.fork_batch(batch_id, from_, fields))

class AsyncThreads(_Resource):
    async def get(self, thread_id: str, *, tenant: str | None = None) -> Thread:
        return await self._c.call(routes.get_thread(thread_id, tenant))


class AsyncApprovals(_Resource):
    async def list(self, *, status: str | None = "pending", limit: int | None = None,
                   cursor: str | None = None) -> ApprovalList:
        return await self._c.call(routes.list_approvals(status, limit, cursor))

    async def decide(self, run_id: str, approval_id: str, decision: str, *, args_digest: str | None = None,
                     **fields: Any) -> Approval:
        return await self._c.call(routes.decide(run_id, approval_id, decision, args_digest, fields))


class AsyncSchedules(_Resource):
    async def create(self, **fields: Any) -> Schedule:
        return await self._c.call(routes.create_schedule(fields))

    async def list(self, *, limit: int | None = None, cursor: str | None = None) -> ScheduleList:
        return await self._c.call(routes.list_schedules(limit, cursor))

    async def get(self, schedule_id: str, *, from_: str | None = None, count: int | None = None,
                  tenant: str | None = None) -> Schedule:
        return await self._c.call(routes.get_schedule(schedule_id, from_, count, tenant))

    async def update(self, schedule_id: str, *, tenant: str | None = None, **fields: Any) -> Schedule:
        return await self._c.call(routes.update_schedule(schedule_id, fields, tenant))

    async def delete(self, schedule_id: str, *, tenant: str | None = None) -> None:
        await self._c.call(routes.delete_schedule(schedule_id, tenant))

    async def trigger(self, schedule_id: str, *, tenant: str | None = None) -> Run:
        return await self._c.call(routes.trigger_schedule(schedule_id, tenant))


class AsyncEvals(_Resource):
    async def create(self, cases: Sequence[Any], evaluators: Sequence[str], **fields: Any) -> Eval:
        """``fields``: name, model, judge_model, system_prompt, concurrency, replay_from, live_tools."""
        return await self._c.call(routes.create_eval(cases, evaluators, fields))

    async def get(self, eval_id: str) -> Eval:
        return await self._c.call(routes.get_eval(eval_id))

    async def list(self, *, limit: int | None = None, cursor: str | None = None) -> EvalList:
        return await self._c.call(routes.list_evals(limit, cursor))

    async def cases(self, eval_id: str, *, limit: int | None = None, cursor: str | None = None) -> EvalCases:
        return await self._c.call(routes.eval_cases(eval_id, limit, cursor))

    async def compare(self, a: str, b: str) -> EvalComparison:
        return await self._c.call(routes.compare_evals(a, b))

    async def wait(self, eval_id: str, *, timeout: float | None = None, poll: float = 0.2) -> Eval:
        """Poll until the eval ended (``TimeoutError`` after ``timeout`` seconds)."""
        started = time.monotonic()
        while not (got := await self.get(eval_id)).done:
            if timeout is not None and time.monotonic() - started > timeout:
                raise TimeoutError(f"eval {eval_id} still {got.status} after {timeout}s")
            await asyncio.sleep(poll)
        return got


class AsyncKeys(_Resource):
    async def create(self, *, tenant: str, scopes: builtins.list[str], name: str | None = None) -> ApiKey:
        return await self._c.call(routes.create_key(tenant, scopes, name))

    async def list(self) -> ApiKeyList:
        return await self._c.call(routes.list_keys())

    async def revoke(self, key_id: str) -> None:
        await self._c.call(routes.revoke_key(key_id))


__all__ = ["AsyncClient"]
