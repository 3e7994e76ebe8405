"""reactq as an MCP server, through the official ``mcp`` client: over stdio (``reactq mcp``)
and streamable HTTP (``/mcp`` on two real gateways with API keys), the session's workers and
the scripted model server. ``reactq_run`` plain and as a task: working → completed,
input_required while an approval waits, cancel, a task made on one gateway read on the other,
another tenant refused."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter

from tests.integration.conftest import ROOT, LLMFixture, worker_env
from tests.integration.test_gateway import Gateway, start_gateway, stop_gateway
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = [pytest.mark.integration, pytest.mark.mcp]
TOKEN = "mcp-admin-token-51ab"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
          "additionalProperties": False}


@pytest.fixture(scope="module")
def gateways(redis_url: str, llm: Any, workers: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Gateway]]:
    tmp = tmp_path_factory.mktemp("mcp-gateways")
    env = worker_env(redis_url, llm, REACTQ_API_TOKEN=TOKEN)
    gws = [start_gateway(env, tmp / "a.log"), start_gateway(env, tmp / "b.log")]
    yield gws
    for gw in gws:
        stop_gateway(gw)


def _key(gw: Gateway, tenant: str, scopes: list[str]) -> str:
    res = httpx2.post(f"{gw.url}/v1/keys", json={"tenant": tenant, "scopes": scopes, "name": tenant},
                     headers={"Authorization": f"Bearer {TOKEN}"})
    assert res.status_code == 201, res.text
    return str(res.json()["key"])


@pytest.fixture(scope="module")
def keys(gateways: list[Gateway]) -> dict[str, str]:
    keys = {t: _key(gateways[0], t, ["runs:read", "runs:write"]) for t in ("acme", "other")}
    return {**keys, "reader": _key(gateways[0], "acme", ["runs:read"])}


@asynccontextmanager
async def over_http(gw: Gateway, key: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        async with Client(streamable_http_client(f"{gw.url}/mcp", http_client=http)) as client:
            yield client


@asynccontextmanager
async def over_stdio(redis_url: str, llm: LLMFixture) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "dispatcher", "mcp"], cwd=str(ROOT),
                                   env=worker_env(redis_url, llm))
    async with Client(params) as client:
        yield client


async def as_task(client: Client, arguments: dict[str, Any]) -> dict[str, Any]:
    raw = await client.session.send_request(types.CallToolRequest(params=types.CallToolRequestParams(
        name="reactq_run", arguments=arguments, task=types.TaskMetadata(ttl=60_000))), TypeAdapter(dict[str, Any]))
    assert raw["resultType"] == "task"
    return dict(raw["task"])


async def get_task(client: Client, task_id: str) -> types.GetTaskResult:
    return await client.session.send_request(types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)),
                                             types.GetTaskResult)


async def until(client: Client, task_id: str, status: str, timeout: float = 30) -> types.GetTaskResult:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        task = await get_task(client, task_id)
        seen.append(task.status)
        if task.status == status:
            return task
        await anyio.sleep(0.1)
    raise AssertionError(f"task {task_id} never {status}: {seen[-5:]}")


def _scripts(llm: LLMFixture, tag: str) -> tuple[str, str]:
    plain = llm.script(llm.unique(f"add for {tag}"), [reply_tool_calls([("a1", "add", {"a": 1, "b": 2})]),
                                                      reply_text("three")], synthesis=reply_text("three"))
    typed = llm.unique(f"capital for {tag}")
    llm.script(typed, [reply_text("Paris")])
    llm.script(f"Question: {typed}", [reply_tool_calls([("o1", "final_answer", {"city": "Paris"})])])
    return plain, typed


async def _lists_and_calls(client: Client, llm: LLMFixture, tag: str) -> None:
    listed = {t.name: t for t in (await client.list_tools()).tools}
    assert "reactq_run" in listed and "query" in listed["reactq_run"].input_schema["properties"]
    plain, typed = _scripts(llm, tag)
    progress: list[tuple[float, str | None]] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append((p, message))

    result = await client.call_tool("reactq_run", {"query": plain, "tools": ["add"]}, progress_callback=on_progress)
    assert not result.is_error and result.content[0].text == "three"  # type: ignore[union-attr]
    assert [m for _, m in progress][:2] == ["turn 1", "turn 2"]
    typed_result = await client.call_tool("reactq_run", {"query": typed, "output_schema": SCHEMA})
    assert typed_result.structured_content == {"city": "Paris"}


async def test_reactq_run_over_stdio(redis_url: str, llm: LLMFixture, workers: Any) -> None:
    async with over_stdio(redis_url, llm) as client:
        await _lists_and_calls(client, llm, "stdio")
        task = await as_task(client, {"query": _scripts(llm, "stdio task")[0]})
        done = await until(client, task["taskId"], "completed")
        assert done.task_id == task["taskId"]


async def test_reactq_run_over_http(gateways: list[Gateway], keys: dict[str, str], llm: LLMFixture) -> None:
    async with over_http(gateways[0], keys["acme"]) as client:
        await _lists_and_calls(client, llm, "http")


async def test_a_task_works_then_completes_and_any_gateway_answers_it(gateways: list[Gateway], keys: dict[str, str],
                                                                      llm: LLMFixture) -> None:
    q = llm.script(llm.unique("slow task"), [reply_tool_calls([("s1", "sleep", {"seconds": 1})]),
                                              reply_text("rested")], synthesis=reply_text("rested"))
    async with over_http(gateways[0], keys["acme"]) as one, over_http(gateways[1], keys["acme"]) as two:
        task = await as_task(one, {"query": q})
        assert task["status"] == "working"
        assert (await get_task(two, task["taskId"])).status == "working"
        await until(two, task["taskId"], "completed")
        result = await two.session.send_request(types.GetTaskPayloadRequest(
            params=types.GetTaskPayloadRequestParams(task_id=task["taskId"])), TypeAdapter(dict[str, Any]))
        assert result["content"][0]["text"] == "rested"
        listed = await one.session.send_request(types.ListTasksRequest(), types.ListTasksResult)
        assert task["taskId"] in [t.task_id for t in listed.tasks]


async def test_input_required_while_an_approval_waits(gateways: list[Gateway], keys: dict[str, str],
                                                      llm: LLMFixture) -> None:
    q = llm.script(llm.unique("mcp pays"), [reply_tool_calls([("t1", "transfer", {"tag": "mcp-approval"})]),
                                             reply_text("paid")], synthesis=reply_text("paid"))
    async with over_http(gateways[0], keys["acme"]) as client:
        task = await as_task(client, {"query": q})
        waiting = await until(client, task["taskId"], "input_required")
        assert "transfer" in (waiting.status_message or "")
        admin = httpx2.Client(base_url=gateways[1].url, headers={"Authorization": f"Bearer {TOKEN}"})
        pending = admin.get(f"/v1/runs/{task['taskId']}/approvals").json()["approvals"][0]
        res = admin.post(f"/v1/runs/{task['taskId']}/approvals/{pending['approval_id']}",
                         json={"decision": "approve", "args_digest": pending["args_digest"]})
        assert res.status_code == 200, res.text
        await until(client, task["taskId"], "completed")


async def test_cancel_and_another_tenant_refused(gateways: list[Gateway], keys: dict[str, str],
                                                 llm: LLMFixture) -> None:
    q = llm.script(llm.unique("long task"), [reply_tool_calls([("s1", "sleep", {"seconds": 5})]),
                                              reply_text("late")], synthesis=reply_text("late"))
    async with over_http(gateways[0], keys["acme"]) as mine, over_http(gateways[1], keys["other"]) as theirs:
        task = await as_task(mine, {"query": q})
        with pytest.raises(MCPError):
            await get_task(theirs, task["taskId"])
        listed = await theirs.session.send_request(types.ListTasksRequest(), types.ListTasksResult)
        assert task["taskId"] not in [t.task_id for t in listed.tasks]
        with pytest.raises(MCPError):
            await theirs.session.send_request(types.CancelTaskRequest(
                params=types.CancelTaskRequestParams(task_id=task["taskId"])), types.CancelTaskResult)
        cancelled = await mine.session.send_request(types.CancelTaskRequest(
            params=types.CancelTaskRequestParams(task_id=task["taskId"])), types.CancelTaskResult)
        assert cancelled.status == "cancelled"
        assert (await get_task(mine, task["taskId"])).status == "cancelled"


async def test_a_refused_call_is_an_error_result_naming_why(gateways: list[Gateway], keys: dict[str, str]) -> None:
    async with over_http(gateways[0], keys["acme"]) as client:
        plain = await client.call_tool("reactq_run", {"query": "hi", "model": "no-such-model"})
        assert plain.is_error and "model" in plain.content[0].text  # type: ignore[union-attr]
        raw = await client.session.send_request(types.CallToolRequest(params=types.CallToolRequestParams(
            name="reactq_run", arguments={"query": "hi", "model": "no-such-model"}, task=types.TaskMetadata())),
            TypeAdapter(dict[str, Any]))
        assert raw["isError"] and "model" in raw["content"][0]["text"]
    async with over_http(gateways[0], keys["reader"]) as reader:
        refused = await reader.call_tool("reactq_run", {"query": "hi"})
        assert refused.is_error and "runs:write" in refused.content[0].text  # type: ignore[union-attr]


async def test_no_key_is_refused(gateways: list[Gateway]) -> None:
    res = httpx2.post(f"{gateways[0].url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert res.status_code == 401
