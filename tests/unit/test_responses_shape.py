"""The Responses API's pure parts: a request → the run request, a run's events → output items
and stream events, gateway errors → OpenAI's shape."""

from __future__ import annotations

import pytest

from reactq.dispatcher.http.responses_errors import openai_error
from reactq.dispatcher.http.responses_in import ResponseCreate, approval_answers, run_request
from reactq.dispatcher.http.responses_shape import ItemBook, response_object, run_id_of
from reactq.shared.errors import RequestError
from reactq.shared.events import Event


def ev(seq: int, channel: str, **data: object) -> Event:
    return Event(channel, {"seq": seq, **data})  # type: ignore[arg-type]


RUN = [ev(1, "step", type="thinking", status="start", iteration=1),
       ev(2, "step", type="iteration", status="start", iteration=1, tool_name="add", tool_args={"a": 1, "b": 2},
          tool_call_id="c1"),
       ev(3, "step", type="iteration", status="done", iteration=1, tool_name="add", tool_call_id="c1",
          observation="3", error=None),
       ev(4, "answer", status="start"), ev(5, "answer", status="delta", content="It is "),
       ev(6, "answer", status="delta", content="3."), ev(7, "answer", status="done"),
       ev(8, "done", status="succeeded", answer="It is 3.", usage={"prompt_tokens": 5, "completion_tokens": 2})]


def test_a_request_becomes_a_run_request() -> None:
    body = ResponseCreate(model="m", input=[{"role": "developer", "content": "be brief"},
                                            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
                          instructions="Talk like a pirate.", tools=[{"type": "function", "name": "add"}],
                          text={"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
                          max_output_tokens=99, metadata={"org": "acme"})
    req = run_request(body, None)
    assert req["query"] == "hi" and req["system_prompt"] == "Talk like a pirate.\n\nbe brief"
    assert req["tools"] == ["add"] and req["output_schema"] == {"type": "object"} and req["token_budget"] == 99
    assert req["thread_id"].startswith("responses.") and req["metadata"]["org"] == "acme"
    follow = run_request(ResponseCreate(input="and?", previous_response_id="resp_r1"), {"thread_id": "responses.t"})
    assert follow["thread_id"] == "responses.t" and "model" not in follow


@pytest.mark.parametrize("body, field", [
    ({"input": [{"role": "assistant", "content": "x"}]}, "input[0].role"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "x", "text": {"format": {"type": "json_schema"}}}, "text.format"),
])
def test_what_reactq_cannot_take_is_refused_naming_the_field(body: dict[str, object], field: str) -> None:
    with pytest.raises(RequestError) as exc:
        run_request(ResponseCreate.model_validate(body), None)
    assert exc.value.field == field


def test_approval_answers_need_the_response_they_answer() -> None:
    answer = {"type": "mcp_approval_response", "approval_request_id": "a1", "approve": False, "reason": "no"}
    assert approval_answers(ResponseCreate(input=[answer], previous_response_id="resp_x"))[0].reason == "no"
    with pytest.raises(RequestError):
        approval_answers(ResponseCreate(input=[answer]))
    with pytest.raises(RequestError):
        approval_answers(ResponseCreate(input=[answer, {"role": "user", "content": "x"}], previous_response_id="r"))


def test_events_make_items_and_numbered_stream_events() -> None:
    book = ItemBook("r1")
    made = [(8 * e.seq + k, kind) for e in RUN for k, (kind, _) in enumerate(book.feed(e))]
    assert [kind for _, kind in made] == [
        "response.output_item.added", "response.output_item.done", "response.output_item.added",
        "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done"]
    numbers = [n for n, _ in made]
    assert numbers == sorted(set(numbers))
    resp = response_object("r1", "succeeded", 10.0, {"model": "m"}, RUN[-1].data, RUN)
    call, message = resp["output"]
    assert call == {"type": "mcp_call", "id": "c1", "server_label": "reactq", "name": "add",
                    "arguments": '{"a":1,"b":2}', "output": "3", "error": None, "status": "completed"}
    assert message["content"][0]["text"] == "It is 3." and resp["status"] == "completed"
    assert resp["usage"]["total_tokens"] == 7 and resp["id"] == "resp_r1" and run_id_of(resp["id"]) == "r1"


def test_a_waiting_run_is_incomplete_with_its_approval_request() -> None:
    asked = ev(3, "approval", status="requested", approval_id="ap1", tool_name="transfer", tool_args={"x": 1})
    resp = response_object("r2", "waiting", 1.0, {}, None, [RUN[0], asked])
    assert resp["status"] == "incomplete"
    assert resp["output"] == [{"type": "mcp_approval_request", "id": "ap1", "server_label": "reactq",
                               "name": "transfer", "arguments": '{"x":1}'}]


@pytest.mark.parametrize("status, body, expected", [
    (422, {"error": {"code": "validation_error", "message": "model: unknown", "field": "model"}},
     (400, "invalid_request_error", "validation_error", "model")),
    (422, {"error": {"code": "validation_error", "message": "m", "details": [{"field": "body.input"}]}},
     (400, "invalid_request_error", "validation_error", "input")),
    (401, {"error": {"code": "unauthorized", "message": "no key"}}, (401, "authentication_error", "invalid_api_key", None)),
    (404, {"error": {"code": "not_found", "message": "no"}}, (404, "invalid_request_error", "not_found", None)),
    (503, {"error": {"code": "unavailable", "message": "down"}}, (503, "server_error", "unavailable", None)),
])
def test_gateway_errors_in_openai_shape(status: int, body: dict[str, object],
                                        expected: tuple[int, str, str, str | None]) -> None:
    code, out = openai_error(status, body)
    err = out["error"]
    assert (code, err["type"], err["code"], err["param"]) == expected and err["message"]
