"""One machine needs nothing: ``reactq.Dispatcher()`` without REACTQ_REDIS_URL attaches to the
embedded server (as the CLI's local commands do), and the local workers the conveniences
start consume every default queue: a run's webhook is delivered."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from reactq.dispatcher.client import Dispatcher
from reactq.dispatcher.local.workers import ensure_workers, stop_workers
from reactq.shared.redisconn import stop_embedded
from reactq.shared.requests import RunRequest
from tests.integration.conftest import LLMFixture
from tests.scripted_server import reply_text
from tests.webhook_receiver import SECRET, Receiver, signature_ok

pytestmark = pytest.mark.integration


def test_a_dispatcher_without_a_url_and_the_local_workers_deliver_a_webhook(
        llm: LLMFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REACTQ_REDIS_URL", "REACTQ_BROKER_URL", "REACTQ_REDIS_CLUSTER", "REACTQ_TOOLS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REACTQ_DATA_DIR", str(tmp_path / "data"))
    for name, value in (("OPENAI_BASE_URL", llm.server.base_url), ("OPENAI_API_KEY", "k"),
                        ("REACTQ_MODEL", "scripted"), ("REACTQ_WEBHOOK_SECRET", SECRET),
                        ("REACTQ_WEBHOOK_ALLOW", "127.0.0.1")):
        monkeypatch.setenv(name, value)
    receiver = Receiver().start()
    d = Dispatcher()
    try:
        assert d.settings.redis_url and (tmp_path / "data" / "valkey.json").exists()
        assert ensure_workers(d.settings, ping=False)
        q = llm.script(llm.unique("one machine webhook"), [reply_text("done")], synthesis=reply_text("delivered"))
        path = f"/local-{uuid.uuid4().hex[:6]}"
        h = d.submit(RunRequest(query=q, completion_check=False, webhook={"url": receiver.url(path)}))
        assert h.result(timeout=60)["answer"] == "delivered"
        got = receiver.wait(path, 1, timeout=30)
        assert got[0].json["type"] == "run.done" and got[0].json["data"]["run_id"] == h.run_id
        assert signature_ok(got[0])
    finally:
        stop_workers(d.settings)
        # d.settings has the embedded server's URL, so stop_workers leaves that server up.
        stop_embedded(tmp_path / "data")
        receiver.stop()
