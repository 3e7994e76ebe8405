"""The HTTP client's pure parts: reading both error bodies, decoding server-sent events,
the retry rule. (Against a real gateway: tests/integration/test_client.py.)"""

from __future__ import annotations

import pickle

import httpx2
import pytest

import reactq
from reactq.dispatcher.api_client import _http, routes
from reactq.dispatcher.api_client._core import SSEDecoder, backoff, with_idempotency_key
from reactq.dispatcher.api_client.errors import error_from_response


def test_the_one_error_shape_is_read_into_its_type():
    body = {"error": {"code": "validation_error", "message": "max_iterations: at least 1",
                      "field": "max_iterations", "details": [{"loc": ["max_iterations"]}]}}
    err = error_from_response(422, body, {})
    assert isinstance(err, reactq.InvalidRequest) and isinstance(err, reactq.RequestError)
    assert (err.status_code, err.code, err.field, err.message) == (422, "validation_error", "max_iterations",
                                                                 "max_iterations: at least 1")
    limited = error_from_response(429, {"error": {"code": "rate_limited", "message": "slow down"}},
                                  {"retry-after": "3"})
    assert isinstance(limited, reactq.RateLimited) and limited.retry_after == 3.0
    assert isinstance(error_from_response(503, {"error": {"code": "unavailable", "message": "x"}}, {}),
                      reactq.ServerError)
    assert type(error_from_response(418, {"error": {"code": "teapot", "message": "x"}}, {})) is reactq.APIError


@pytest.mark.parametrize(("status", "body", "kind", "code", "field"), [
    (404, {"detail": "no run with id 'x'"}, reactq.NotFound, "not_found", None),
    (409, {"detail": "thread t is busy", "active_run": "r1"}, reactq.Conflict, "conflict", None),
    (401, {"detail": "missing or bad token"}, reactq.Unauthorized, "unauthorized", None),
    (422, {"detail": [{"type": "value_error", "loc": ["body", "max_iterations"], "msg": "too small"}]},
     reactq.InvalidRequest, "validation_error", "max_iterations"),
    (500, "Internal Server Error", reactq.ServerError, "internal_error", None),
])
def test_the_older_detail_bodies_are_read_too(status, body, kind, code, field):
    err = error_from_response(status, body, {})
    assert isinstance(err, kind) and (err.code, err.field) == (code, field)
    assert err.message and str(status) in str(err)


def test_errors_pickle_with_their_fields():
    err = error_from_response(422, {"detail": [{"loc": ["body", "query"], "msg": "empty"}]}, {})
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is reactq.InvalidRequest and (back.field, back.code, back.status_code) == ("query",
                                                                                                "validation_error", 422)


def test_the_sse_decoder_keeps_ids_skips_comments_and_reads_retry_hints():
    dec = SSEDecoder()
    lines = ["retry: 1000", ": keepalive", "", "id: 1-0", "event: step", 'data: {"seq": 1}', "",
             "event: done", 'data: {"seq": 2,', 'data:  "status": "succeeded"}', ""]
    events = list(dec.events(lines))
    assert [(e.event, e.id, e.data["seq"]) for e in events] == [("step", "1-0", 1), ("done", "1-0", 2)]
    assert events[1].data["status"] == "succeeded" and dec.retry_ms == 1000


def test_only_calls_safe_to_repeat_are_retried():
    create = routes.create_run(None, {"query": "q"})
    assert create.json["idempotency_key"].startswith("client-") and create.retry
    assert with_idempotency_key({"idempotency_key": "mine"}) == {"idempotency_key": "mine"}
    interrupt = routes.interrupt_run("r", "hi")
    reset, refused = httpx2.ReadError("reset"), httpx2.ConnectError("refused")
    assert not _http.retryable(interrupt, _http.transport_error(reset), reset)
    assert _http.retryable(interrupt, _http.transport_error(refused), refused)  # nothing was sent
    assert _http.retryable(routes.get_run("r"), reactq.ServerError("x", status_code=503), None)
    assert not _http.retryable(routes.get_run("r"), reactq.ServerError("x", status_code=500), None)
    assert isinstance(_http.transport_error(httpx2.ReadTimeout("slow")), reactq.APITimeoutError)
    assert backoff(1, retry_after=5.0) == 5.0 and backoff(10) <= 4.0


def test_ids_cannot_change_the_route():
    assert routes.get_run("../keys").path == "/v1/runs/..%2Fkeys"


def test_the_fork_calls_name_their_routes_and_send_from() -> None:
    from reactq.dispatcher.api_client import routes

    call = routes.fork_run("r1", 2, {"reuse": "all", "dry_run": None, "edit": None})
    assert (call.method, call.path) == ("POST", "/v1/runs/r1/fork")
    assert call.json is not None and call.json["from"] == 2 and call.json["reuse"] == "all"
    assert call.json["idempotency_key"], "a fork is retried with one key: the same fork"
    dry = routes.fork_run("r1", None, {"dry_run": True})
    assert dry.json == {"dry_run": True}
    batch = routes.fork_batch("b1", "last_turn", {"status": ["failed", "cancelled"], "dry_run": None})
    assert batch.path == "/v1/batches/b1/fork" and batch.json == {"status": ["failed", "cancelled"],
                                                                  "from": "last_turn"}
    assert routes.fork_dag("d1").path == "/v1/dags/d1/fork"
