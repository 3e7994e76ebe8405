"""Approvals, precisely, with real workers and the scripted model: whose terms an approval
follows, whose tenant it names, and the event sequence a client sees while a call waits.

The ``transfer`` tool (``tests/integration/tools.py``) requires approval and records every run it
makes; ``slow`` sleeps and records when it ended.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
import redis

from reactq.dispatcher.client import Dispatcher, RunHandle
from reactq.shared.requests import RunRequest
from tests.integration.conftest import LLMFixture
from tests.integration.test_approvals import _events, _requested, _runs_of, _tool_message, _wait
from tests.scripted_server import reply_text, reply_tool_calls

pytestmark = pytest.mark.integration


def _submit(llm: LLMFixture, d: Dispatcher, tag: str, calls: list[tuple[str, str, dict[str, Any]]],
            **request: Any) -> RunHandle:
    q = llm.script(llm.unique(f"precisely {tag}"), [reply_tool_calls(calls), reply_text("all done")],
                   synthesis=reply_text("synthesized"))
    return d.submit(RunRequest(query=q, completion_check=False, **request))


def _calls_events(h: RunHandle, call_id: str) -> list[tuple[str, str]]:
    """``(channel, status)`` of the events about ``call_id``, in stream order."""
    return [(e.channel, e.data.get("status")) for e in _events(h) if e.data.get("tool_call_id") == call_id]


def test_a_request_cannot_make_a_demanded_approval_expire_into_approve(workers: Any, dispatcher: Dispatcher,
                                                                       llm: LLMFixture, r: redis.Redis) -> None:
    tag = f"skip-{uuid.uuid4().hex[:6]}"
    h = _submit(llm, dispatcher, tag, [("t1", "transfer", {"tag": tag, "amount": 5})],
                approval={"timeout_s": 1, "on_timeout": "approve"})
    req = _requested(h)[0]
    # The tool demands the approval: the operator's terms (REACTQ_APPROVAL_TIMEOUT_S, reject).
    assert req["expires_at"] - time.time() > 3600
    listed = h.approvals()[0]
    assert listed["on_timeout"] == "reject" and listed["timeout_s"] > 3600
    time.sleep(2.5)  # well past the request's timeout_s
    assert _runs_of(r, tag) == [] and h.approvals()[0]["status"] == "pending"
    h.cancel()
    assert h.result(timeout=10)["status"] == "cancelled"
    assert _runs_of(r, tag) == []


def test_the_run_sets_the_terms_of_the_waits_it_adds(workers: Any, dispatcher: Dispatcher,
                                                     llm: LLMFixture) -> None:
    tag = f"added-{uuid.uuid4().hex[:6]}"
    h = _submit(llm, dispatcher, tag, [("e1", "echo", {"text": tag})],
                approval={"tools": ["echo"], "timeout_s": 1, "on_timeout": "approve"})
    req = _requested(h)[0]
    assert req["expires_at"] - time.time() < 1.5
    assert h.result(timeout=30)["status"] == "succeeded"
    assert h.approvals()[0]["status"] == "expired"
    assert _tool_message(llm, h, "e1") == tag


@pytest.fixture
def http_open(dispatcher: Dispatcher) -> Any:
    from fastapi.testclient import TestClient

    from reactq.dispatcher.http.app import create_app

    with TestClient(create_app(dispatcher.settings)) as client:
        yield client


def test_an_approval_names_its_runs_tenant(workers: Any, dispatcher: Dispatcher, llm: LLMFixture,
                                           http_open: Any) -> None:
    tag = f"tenant-{uuid.uuid4().hex[:6]}"
    q = llm.script(llm.unique(f"precisely {tag}"),
                   [reply_tool_calls([("t1", "transfer", {"tag": tag})]), reply_text("ok")],
                   synthesis=reply_text("ok"))
    h = dispatcher.submit(RunRequest(query=q, completion_check=False), tenant="acme")
    req = _requested(h)[0]
    assert h.approvals()[0]["tenant"] == "acme"
    inbox = http_open.get("/v1/approvals", params={"limit": 500}).json()["approvals"]
    assert [a["tenant"] for a in inbox if a["approval_id"] == req["approval_id"]] == ["acme"]
    assert dispatcher.approvals.get(h.run_id, req["approval_id"])["tenant"] == "acme"
    h.cancel()
    assert h.result(timeout=10)["status"] == "cancelled"


def test_a_waiting_call_starts_after_its_decision_and_the_others_report_at_once(
        workers: Any, dispatcher: Dispatcher, llm: LLMFixture, r: redis.Redis) -> None:
    tag = f"seq-{uuid.uuid4().hex[:6]}"
    calls = [("t1", "transfer", {"tag": tag, "amount": 5}),
             ("s1", "slow", {"tag": f"fast-{tag}", "seconds": 0.2}),
             ("s2", "slow", {"tag": f"later-{tag}", "seconds": 1.5})]
    h = _submit(llm, dispatcher, tag, calls)
    req = _requested(h)[0]
    # The free calls run at once; each one's ``iteration done`` is out within about a second
    # of its completion, while the transfer still waits.
    for free, who in (("s1", f"fast-{tag}"), ("s2", f"later-{tag}")):
        ran = _wait(lambda who=who: _runs_of(r, who), f"{free} to run")[0]
        _wait(lambda free=free: ("step", "done") in _calls_events(h, free), f"{free}'s iteration done", timeout=10)
        sid = next(i for i, e in h.events(until_done=False)
                   if e.data.get("tool_call_id") == free and e.data.get("status") == "done")
        published = int(sid.split("-")[0]) / 1000
        assert published - ran["ended"] < 1.0, (free, published - ran["ended"])
    assert h.status()["status"] == "waiting"
    # The waiting call: its first event is the request; no start before a person decides.
    assert _calls_events(h, "t1") == [("approval", "requested")]
    h.decide(req["approval_id"], "approve", by="ops")
    assert h.result(timeout=60)["status"] == "succeeded"
    assert _calls_events(h, "t1") == [("approval", "requested"), ("approval", "approved"),
                                      ("step", "start"), ("step", "done")]
    # The free calls' events are not published again when the run goes on.
    for free in ("s1", "s2"):
        assert _calls_events(h, free) == [("step", "start"), ("step", "done")]
    events = [e for _, e in h.events(timeout=10)]
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "each seq once, in order"
    done = next(e.data for e in events if e.data.get("tool_call_id") == "t1" and e.data.get("status") == "done")
    assert done["approval"] == "approved" and done["observation"] == f"moved 5 ({tag})"


@pytest.mark.parametrize("decision", ["reject", "respond", "edit"])
def test_after_a_decision_the_call_has_the_events_its_effect_says(workers: Any, dispatcher: Dispatcher,
                                                                   llm: LLMFixture, decision: str) -> None:
    tag = f"dec-{decision}-{uuid.uuid4().hex[:6]}"
    h = _submit(llm, dispatcher, tag, [("t1", "transfer", {"tag": tag, "amount": 5}),
                                       ("e1", "echo", {"text": tag})])
    req = _requested(h)[0]
    extra: dict[str, Any] = {"message": "by hand"} if decision != "edit" else {"args": {"tag": tag, "amount": 2}}
    h.decide(req["approval_id"], decision, **extra)
    assert h.result(timeout=60)["status"] == "succeeded"
    seen = [(e.channel, e.data.get("status")) for e in _events(h) if e.data.get("tool_call_id") == "t1"]
    status = {"reject": "rejected", "respond": "responded", "edit": "edited"}[decision]
    if decision == "edit":
        assert seen == [("approval", "requested"), ("approval", status), ("step", "start"), ("step", "done")]
        start = next(e.data for e in _events(h) if e.data.get("tool_call_id") == "t1"
                     and e.data.get("status") == "start")
        assert start["approved_args"] == {"tag": tag, "amount": 2}
    else:
        assert seen == [("approval", "requested"), ("approval", status), ("step", "done")]
    assert [(e.channel, e.data.get("status")) for e in _events(h) if e.data.get("tool_call_id") == "e1"] == [
        ("step", "start"), ("step", "done")]
    events = [e for _, e in h.events(timeout=10)]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


def test_the_inbox_json_of_the_cli_names_the_tenant(workers: Any, dispatcher: Dispatcher, llm: LLMFixture,
                                                    redis_url: str) -> None:
    from tests.integration.conftest import worker_env
    from tests.integration.test_cli import reactq

    tag = f"clit-{uuid.uuid4().hex[:6]}"
    q = llm.script(llm.unique(f"precisely {tag}"),
                   [reply_tool_calls([("t1", "transfer", {"tag": tag})]), reply_text("ok")],
                   synthesis=reply_text("ok"))
    h = dispatcher.submit(RunRequest(query=q, completion_check=False), tenant="globex")
    req = _requested(h)[0]
    listed = reactq("approvals", "--run", h.run_id, "--json", env=worker_env(redis_url, llm))
    assert listed.returncode == 0, listed.stderr
    rows = [a for a in json.loads(listed.stdout)["approvals"] if a["approval_id"] == req["approval_id"]]
    assert rows and rows[0]["tenant"] == "globex"
    h.cancel()


@pytest.mark.parametrize("decision", ["approve", "reject"])
async def test_both_shells_publish_the_same_events_for_a_call_that_waits(
        workers: Any, dispatcher: Dispatcher, llm: LLMFixture, settings: Any, monkeypatch: Any,
        decision: str) -> None:
    from reactq.shared.engine.deps import EngineDeps
    from reactq.shared.events import ListSink
    from reactq.shared.inprocess import run_local
    from reactq.shared.llm.registry import load_registry
    from reactq.shared.settings import EngineConfig
    from reactq.shared.tools.loader import default_registry
    from tests.integration.conftest import SELECTION_THRESHOLD
    from tests.integration.test_distributed_run import _normalized

    monkeypatch.setenv("REACTQ_TOOL_SELECTION_THRESHOLD", SELECTION_THRESHOLD)  # as the workers
    monkeypatch.delenv("REACTQ_REDIS_URL", raising=False)  # the local transfer records nothing
    tag = f"shells-{decision}-{uuid.uuid4().hex[:6]}"
    queries = [llm.script(llm.unique(f"precisely {tag} {shell}"),
                          [reply_tool_calls([("t1", "transfer", {"tag": tag, "amount": 5})]), reply_text("ok")],
                          synthesis=reply_text("moved")) for shell in ("local", "workers")]

    async def approver(rec: dict[str, Any]) -> dict[str, Any]:
        return {"decision": decision, "by": "ops"}

    deps = EngineDeps(llm=load_registry(settings).get_default(), registry=default_registry(settings),
                      config=EngineConfig())
    sink = ListSink()
    await run_local(RunRequest(query=queries[0], completion_check=False), deps, sink=sink, approver=approver)
    h = dispatcher.submit(RunRequest(query=queries[1], completion_check=False))
    req = _requested(h)[0]
    h.decide(req["approval_id"], decision, by="ops")
    remote = [e for _, e in h.events(timeout=60)]
    assert _normalized(remote) == _normalized(sink.events)
    kinds = [(e.channel, e.data.get("status")) for e in remote if e.data.get("tool_call_id") == "t1"]
    decided = "approved" if decision == "approve" else "rejected"
    tail = [("step", "start"), ("step", "done")] if decision == "approve" else [("step", "done")]
    assert kinds == [("approval", "requested"), ("approval", decided), *tail]
