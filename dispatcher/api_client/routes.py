"""Every operation of the HTTP client as a ``Call`` (no I/O): the sync and the async client
send the same calls, so the two cannot drift apart."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel

from reactq.dispatcher.api_client._core import Call, with_idempotency_key
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
    Fork,
    Interrupt,
    Run,
    RunList,
    Schedule,
    ScheduleList,
    Thread,
)

Body = BaseModel | Mapping[str, Any] | None


def _p(value: str) -> str:
    """A path segment (an id a caller passed), escaped: it can never change the route."""
    return quote(str(value), safe="")


def request_fields(request: Body, fields: dict[str, Any]) -> dict[str, Any]:
    """A request object or mapping, then keyword fields over it, as JSON-ready fields."""
    base: dict[str, Any] = {}
    if isinstance(request, BaseModel):
        base = request.model_dump(mode="json", exclude_unset=True)
    elif request is not None:
        base = dict(request)
    return {**base, **fields}


# -- runs ---------------------------------------------------------------------------------------

def create_run(request: Body, fields: dict[str, Any]) -> Call[Run]:
    body = with_idempotency_key(request_fields(request, fields))
    return Call("POST", "/v1/runs", Run.model_validate, json=body, retry=True)


def get_run(run_id: str) -> Call[Run]:
    return Call("GET", f"/v1/runs/{_p(run_id)}", Run.model_validate, retry=True)


def list_runs(status: str | None, batch_id: str | None, thread_id: str | None, limit: int | None,
              cursor: str | None, extra: dict[str, Any]) -> Call[RunList]:
    params = {"status": status, "batch_id": batch_id, "thread_id": thread_id, "limit": limit, "cursor": cursor,
              **extra}
    return Call("GET", "/v1/runs", RunList.model_validate, params=params, retry=True)


def run_events_path(run_id: str) -> str:
    return f"/v1/runs/{_p(run_id)}/events"


def cancel_run(run_id: str) -> Call[Run]:
    return Call("POST", f"/v1/runs/{_p(run_id)}/cancel", lambda b: Run.model_validate({"run_id": run_id, **b}),
                retry=True)


def interrupt_run(run_id: str, content: str) -> Call[Interrupt]:
    return Call("POST", f"/v1/runs/{_p(run_id)}/interrupts", Interrupt.parse, json={"content": content})


def run_approvals(run_id: str) -> Call[list[Approval]]:
    return Call("GET", f"/v1/runs/{_p(run_id)}/approvals",
                lambda b: [Approval.model_validate(a) for a in b.get("approvals", [])], retry=True)


# -- approvals ----------------------------------------------------------------------------------

def list_approvals(status: str | None, limit: int | None, cursor: str | None) -> Call[ApprovalList]:
    return Call("GET", "/v1/approvals", ApprovalList.model_validate,
                params={"status": status, "limit": limit, "cursor": cursor}, retry=True)


def decide(run_id: str, approval_id: str, decision: str, args_digest: str | None,
           fields: dict[str, Any]) -> Call[Approval]:
    body = {"decision": decision, "args_digest": args_digest, **fields}
    # A second identical decision is a 409 naming the first: safe to send again.
    return Call("POST", f"/v1/runs/{_p(run_id)}/approvals/{_p(approval_id)}", Approval.model_validate,
                json={k: v for k, v in body.items() if v is not None}, retry=True)


# -- DAGs ---------------------------------------------------------------------------------------

def create_dag(request: Body, fields: dict[str, Any]) -> Call[Dag]:
    body = with_idempotency_key(request_fields(request, fields))
    return Call("POST", "/v1/dags", Dag.model_validate, json=body, retry=True)


def get_dag(dag_id: str) -> Call[Dag]:
    return Call("GET", f"/v1/dags/{_p(dag_id)}", Dag.model_validate, retry=True)


def list_dags(status: str | None, limit: int | None, cursor: str | None) -> Call[DagList]:
    return Call("GET", "/v1/dags", DagList.model_validate,
                params={"status": status, "limit": limit, "cursor": cursor}, retry=True)


def dag_events_path(dag_id: str) -> str:
    return f"/v1/dags/{_p(dag_id)}/events"


def cancel_dag(dag_id: str) -> Call[Dag]:
    return Call("POST", f"/v1/dags/{_p(dag_id)}/cancel", lambda b: Dag.model_validate({"dag_id": dag_id, **b}),
                retry=True)


def interrupt_dag(dag_id: str, content: str) -> Call[Interrupt]:
    return Call("POST", f"/v1/dags/{_p(dag_id)}/interrupts", Interrupt.parse, json={"content": content})


# -- evals --------------------------------------------------------------------------------------

def create_eval(cases: Sequence[Any], evaluators: Sequence[str], fields: dict[str, Any]) -> Call[Eval]:
    body = {"cases": list(cases), "evaluators": list(evaluators), **{k: v for k, v in fields.items() if v is not None}}
    return Call("POST", "/v1/evals", Eval.model_validate, json=body)


def get_eval(eval_id: str) -> Call[Eval]:
    return Call("GET", f"/v1/evals/{_p(eval_id)}", Eval.model_validate, retry=True)


def list_evals(limit: int | None, cursor: str | None) -> Call[EvalList]:
    return Call("GET", "/v1/evals", EvalList.model_validate, params={"limit": limit, "cursor": cursor}, retry=True)


def eval_cases(eval_id: str, limit: int | None, cursor: str | None) -> Call[EvalCases]:
    return Call("GET", f"/v1/evals/{_p(eval_id)}/cases", EvalCases.model_validate,
                params={"limit": limit, "cursor": cursor}, retry=True)


def compare_evals(a: str, b: str) -> Call[EvalComparison]:
    return Call("GET", f"/v1/evals/{_p(a)}/compare/{_p(b)}", EvalComparison.model_validate, retry=True)


# -- batches ------------------------------------------------------------------------------------

def create_batch(requests: Sequence[Any], concurrency: int | None, token_budget: int | None) -> Call[Batch]:
    items = [request_fields(r, {}) if isinstance(r, BaseModel) else r for r in requests]
    body = {"requests": items, "concurrency": concurrency, "token_budget": token_budget}
    return Call("POST", "/v1/batches", Batch.model_validate, json={k: v for k, v in body.items() if v is not None})


def get_batch(batch_id: str, results: bool) -> Call[Batch]:
    return Call("GET", f"/v1/batches/{_p(batch_id)}", Batch.model_validate,
                params={"results": "true" if results else None}, retry=True)


def list_batches(status: str | None, limit: int | None, cursor: str | None) -> Call[BatchList]:
    return Call("GET", "/v1/batches", BatchList.model_validate,
                params={"status": status, "limit": limit, "cursor": cursor}, retry=True)


def cancel_batch(batch_id: str) -> Call[Batch]:
    return Call("POST", f"/v1/batches/{_p(batch_id)}/cancel",
                lambda b: Batch.model_validate({"batch_id": batch_id, **b}), retry=True)


# -- threads, schedules, keys -------------------------------------------------------------------

# ``tenant``: an admin key's reach into another tenant's thread or schedule (ids a client
# chooses are per tenant).

def get_thread(thread_id: str, tenant: str | None = None) -> Call[Thread]:
    return Call("GET", f"/v1/threads/{_p(thread_id)}", Thread.model_validate, params={"tenant": tenant}, retry=True)


def create_schedule(fields: dict[str, Any]) -> Call[Schedule]:
    # Retried only when the caller named the schedule (a repeat then meets the same id).
    return Call("POST", "/v1/schedules", Schedule.model_validate, json=fields, retry="schedule_id" in fields)


def list_schedules(limit: int | None, cursor: str | None) -> Call[ScheduleList]:
    return Call("GET", "/v1/schedules", ScheduleList.model_validate, params={"limit": limit, "cursor": cursor},
                retry=True)


def get_schedule(schedule_id: str, from_: str | None, count: int | None, tenant: str | None = None,
                 ) -> Call[Schedule]:
    return Call("GET", f"/v1/schedules/{_p(schedule_id)}", Schedule.model_validate,
                params={"from": from_, "count": count, "tenant": tenant}, retry=True)


def update_schedule(schedule_id: str, fields: dict[str, Any], tenant: str | None = None) -> Call[Schedule]:
    return Call("PATCH", f"/v1/schedules/{_p(schedule_id)}", Schedule.model_validate, json=fields,
                params={"tenant": tenant}, retry=True)


def delete_schedule(schedule_id: str, tenant: str | None = None) -> Call[None]:
    return Call("DELETE", f"/v1/schedules/{_p(schedule_id)}", lambda _: None, params={"tenant": tenant},
                retry=True)


def trigger_schedule(schedule_id: str, tenant: str | None = None) -> Call[Run]:
    return Call("POST", f"/v1/schedules/{_p(schedule_id)}/trigger", Run.model_validate, params={"tenant": tenant})


def create_key(tenant: str, scopes: list[str], name: str | None) -> Call[ApiKey]:
    body = {"tenant": tenant, "scopes": scopes, "name": name}
    return Call("POST", "/v1/keys", ApiKey.model_validate, json={k: v for k, v in body.items() if v is not None})


def list_keys() -> Call[ApiKeyList]:
    return Call("GET", "/v1/keys", ApiKeyList.model_validate, retry=True)


def revoke_key(key_id: str) -> Call[None]:
    return Call("DELETE", f"/v1/keys/{_p(key_id)}", lambda _: None, retry=True)


# -- forks ----------------------------------------------------------------------------------------

def fork_fields(from_: str | int | None, fields: dict[str, Any]) -> dict[str, Any]:
    """A fork request's fields (``from_`` is sent as ``from``; None values left out)."""
    body = {k: v for k, v in fields.items() if v is not None}
    if from_ is not None:
        body["from"] = from_
    return body


def fork_run(run_id: str, from_: str | int | None, fields: dict[str, Any]) -> Call[Fork]:
    body = fork_fields(from_, fields)
    if not body.get("dry_run"):
        body = with_idempotency_key(body)  # a retry answers the same fork
    return Call("POST", f"/v1/runs/{_p(run_id)}/fork", Fork.model_validate, json=body, retry=True)


def fork_batch(batch_id: str, from_: str | int | None, fields: dict[str, Any]) -> Call[BatchFork]:
    # The same request answers the same batch: safe to retry.
    return Call("POST", f"/v1/batches/{_p(batch_id)}/fork", BatchFork.model_validate,
                json=fork_fields(from_, fields), retry=True)


def fork_dag(dag_id: str) -> Call[DagFork]:
    return Call("POST", f"/v1/dags/{_p(dag_id)}/fork", DagFork.model_validate, json={}, retry=True)
