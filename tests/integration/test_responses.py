"""``/v1/responses`` with the official ``openai`` client: real HTTP against a real gateway
(``reactq serve`` with API keys), the session's workers and the scripted model server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest

from tests.integration.conftest import LLMFixture, worker_env
from tests.integration.test_gateway import Gateway, start_gateway, stop_gateway
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = pytest.mark.integration
TOKEN = "responses-admin-token-7d1e"


@pytest.fixture(scope="module")
def gateway(redis_url: str, llm: Any, workers: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    env = worker_env(redis_url, llm, REACTQ_API_TOKEN=TOKEN, REACTQ_SSE_KEEPALIVE="0.5")
    gw = start_gateway(env, tmp_path_factory.mktemp("responses") / "gateway.log")
    yield gw
    stop_gateway(gw)


def _key(gw: Gateway, tenant: str, scopes: list[str]) -> str:
    res = httpx2.post(f"{gw.url}/v1/keys", json={"tenant": tenant, "scopes": scopes, "name": tenant},
                     headers={"Authorization": f"Bearer {TOKEN}"})
    assert res.status_code == 201, res.text
    return str(res.json()["key"])


@pytest.fixture(scope="module")
def keys(gateway: Gateway) -> dict[str, str]:
    return {"acme": _key(gateway, "acme", ["runs:read", "runs:write", "approvals:write"]),
            "other": _key(gateway, "other", ["runs:read", "runs:write"])}


@pytest.fixture
def client(gateway: Gateway, keys: dict[str, str]) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=keys["acme"], max_retries=0, timeout=60)


def _wait(client: openai.OpenAI, resp_id: str, statuses: set[str], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        resp = client.responses.retrieve(resp_id)
        if resp.status in statuses:
            return resp
        time.sleep(0.1)
    raise AssertionError(f"{resp_id} never reached {statuses}")


def test_a_blocking_call_with_a_tool_answers_its_mcp_call_and_message(client: openai.OpenAI,
                                                                       llm: LLMFixture) -> None:
    q = llm.script(llm.unique("add two numbers"),
                   [reply_tool_calls([("c1", "add", {"a": 2, "b": 3})]), reply_text("It is 5.")],
                   synthesis=reply_text("It is 5."))
    resp = client.responses.create(model="scripted", input=q, tools=[{"type": "function", "name": "add"}])
    assert resp.status == "completed" and resp.id.startswith("resp_")
    calls = [i for i in resp.output if i.type == "mcp_call"]
    assert [(c.name, json.loads(c.arguments), c.server_label) for c in calls] == [("add", {"a": 2, "b": 3}, "reactq")]
    assert calls[0].output and "5" in calls[0].output and calls[0].error is None
    assert resp.output_text == "It is 5."
    assert resp.usage is not None and resp.usage.total_tokens > 0


def test_background_then_retrieve_and_cancel(client: openai.OpenAI, llm: LLMFixture) -> None:
    q = llm.script(llm.unique("sleep a while"), [reply_tool_calls([("s1", "sleep", {"seconds": 5})]),
                                                  reply_text("slept")], synthesis=reply_text("slept"))
    resp = client.responses.create(model="scripted", input=q, background=True)
    assert resp.status in ("queued", "in_progress")
    running = _wait(client, resp.id, {"in_progress"})
    assert running.id == resp.id and running.background
    cancelled = client.responses.cancel(resp.id)
    assert cancelled.status == "cancelled"
    assert client.responses.retrieve(resp.id).status == "cancelled"


def test_a_stream_and_its_resume_after_n_give_exactly_the_events_after_n(client: openai.OpenAI,
                                                                          llm: LLMFixture) -> None:
    q = llm.script(llm.unique("echo then answer"),
                   [reply_tool_calls([("e1", "echo", {"text": "hi"})]), reply_text("done: hi")],
                   synthesis=reply_text("done: hi"))
    events = list(client.responses.create(model="scripted", input=q, stream=True))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed" and "response.output_text.delta" in types
    assert "response.output_item.added" in types and "response.output_item.done" in types
    numbers = [e.sequence_number for e in events]
    assert numbers == sorted(set(numbers))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "done: hi" and events[-1].response.output_text == "done: hi"
    resp_id = events[0].response.id
    for n in (numbers[1], numbers[len(numbers) // 2], numbers[-2]):
        again = list(client.responses.retrieve(resp_id, stream=True, starting_after=n))
        assert [(e.sequence_number, e.type) for e in again] == [(e.sequence_number, e.type)
                                                                 for e in events if e.sequence_number > n]


def test_instructions_are_the_system_prompt(client: openai.OpenAI, llm: LLMFixture) -> None:
    q = llm.script(llm.unique("who are you"), [reply_text("a pirate")], synthesis=reply_text("a pirate"))
    resp = client.responses.create(model="scripted", input=q, instructions="Talk like a pirate.")
    assert resp.instructions == "Talk like a pirate." and resp.output_text == "a pirate"
    sent = json.dumps(llm.requests_for(q))
    assert "Talk like a pirate." in sent


def test_previous_response_id_continues_the_conversation(client: openai.OpenAI, llm: LLMFixture) -> None:
    first = llm.script(llm.unique("my name is Ada"), [reply_text("Hello Ada")], synthesis=reply_text("Hello Ada"))
    second = llm.script(llm.unique("what is my name"), [reply_text("Ada")], synthesis=reply_text("Ada"))
    one = client.responses.create(model="scripted", input=first)
    two = client.responses.create(model="scripted", input=second, previous_response_id=one.id)
    assert two.status == "completed" and two.previous_response_id == one.id
    seen = [r for r in llm.server.bodies if any(m.get("content") == second for m in r.get("messages", []))]
    assert seen and any("Hello Ada" in json.dumps(r["messages"]) for r in seen)


def test_a_json_schema_format_is_the_output_schema(client: openai.OpenAI, llm: LLMFixture) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
              "additionalProperties": False}
    q = llm.unique("capital of France as JSON")
    llm.script(q, [reply_text("Paris")])
    llm.script(f"Question: {q}", [reply_tool_calls([("o1", "final_answer", {"city": "Paris"})])])
    resp = client.responses.create(model="scripted", input=q,
                                   text={"format": {"type": "json_schema", "name": "capital", "schema": schema}})
    assert resp.status == "completed", resp.error
    assert json.loads(resp.output_text) == {"city": "Paris"}
    assert resp.text.format.type == "json_schema"


def test_an_approval_is_requested_and_approved_through_the_client(client: openai.OpenAI, llm: LLMFixture) -> None:
    q = llm.script(llm.unique("pay the invoice"),
                   [reply_tool_calls([("t1", "transfer", {"tag": "resp-approval", "amount": 7})]),
                    reply_text("paid")], synthesis=reply_text("paid"))
    resp = client.responses.create(model="scripted", input=q)
    assert resp.status == "incomplete"
    asks = [i for i in resp.output if i.type == "mcp_approval_request"]
    assert len(asks) == 1 and asks[0].name == "transfer" and json.loads(asks[0].arguments)["amount"] == 7
    done = client.responses.create(model="scripted", previous_response_id=resp.id, input=[
        {"type": "mcp_approval_response", "approval_request_id": asks[0].id, "approve": True}])
    assert done.id == resp.id and done.status == "completed"
    call = next(i for i in done.output if i.type == "mcp_call")
    assert call.name == "transfer" and "moved 7" in (call.output or "")


def test_the_sdk_raises_its_own_typed_errors(gateway: Gateway, client: openai.OpenAI, keys: dict[str, str],
                                             llm: LLMFixture) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model="no-such-model", input="hi")
    assert bad.value.body["param"] == "model" and bad.value.body["type"] == "invalid_request_error"  # type: ignore[index]
    stranger = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="rq_not-a-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.responses.create(model="scripted", input="hi")
    q = llm.script(llm.unique("private"), [reply_text("mine")], synthesis=reply_text("mine"))
    mine = client.responses.create(model="scripted", input=q)
    other = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=keys["other"], max_retries=0)
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.cancel(mine.id)
    with pytest.raises(openai.PermissionDeniedError):  # deciding needs approvals:write
        other.responses.create(model="scripted", previous_response_id=mine.id, input=[
            {"type": "mcp_approval_response", "approval_request_id": "x", "approve": True}])
