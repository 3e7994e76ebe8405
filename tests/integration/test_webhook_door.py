"""Webhook URLs at the door and at each attempt: the http_fetch SSRF guard refuses loopback,
private, link-local and metadata addresses in every spelling (422, nothing stored, no
connection), and an attempt whose name now resolves elsewhere (DNS rebinding) connects to
nothing it did not check."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from reactq.dispatcher.http import create_app
from reactq.shared.keys import Keys
from reactq.shared.settings import Settings
from reactq.shared.stores.webhooks import Delivery
from reactq.workers.webhooks import attempt
from tests.webhook_receiver import SECRET, Plan, Receiver

pytestmark = pytest.mark.integration


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = Receiver().start()
    yield rec
    rec.stop()


@pytest.fixture
def resolve_as(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Names this test's resolver answers itself (a DNS name pointing at loopback)."""
    table: dict[str, str] = {}
    real = socket.getaddrinfo

    def fake(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if isinstance(name, str) and name in table:
            return real(table[name], port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return table


def _settings(redis_url: str, allow: str = "") -> Settings:
    return Settings(redis_url=redis_url, key_prefix=f"door{time.monotonic_ns()}:", webhook_secret=SECRET,
                    webhook_allow=allow, model="scripted", demo_tools=True)


def test_loopback_private_and_metadata_urls_are_refused_at_the_door_without_a_connection(
        redis_url: str, receiver: Receiver, resolve_as: dict[str, str]) -> None:
    resolve_as["hooks.rebind.test"] = "127.0.0.1"
    p = receiver.port
    spellings = [f"http://127.0.0.1:{p}/h", f"http://localhost:{p}/h", f"http://[::1]:{p}/h",
                 f"http://0x7f000001:{p}/h", f"http://2130706433:{p}/h", f"http://127.1:{p}/h",
                 "http://169.254.169.254/latest/meta-data", "http://10.1.2.3/h", "http://192.168.1.1/h",
                 f"http://[::ffff:127.0.0.1]:{p}/h", f"http://hooks.rebind.test:{p}/h"]
    settings = _settings(redis_url)
    with TestClient(create_app(settings)) as http:
        for url in spellings:
            for route, body in (("/v1/runs", {"query": "q"}), ("/v1/dags", {"goal": "g"}),
                                ("/v1/batches", {"requests": [{"query": "q"}]})):
                res = http.post(route, json={**body, "webhook": {"url": url}})
                assert res.status_code == 422, (route, url, res.text)
                assert "webhook.url" in res.text and "REACTQ_WEBHOOK_ALLOW" in res.text, res.text
        no_secret = Settings(redis_url=redis_url, key_prefix=settings.key_prefix, webhook_allow="127.0.0.1")
        with TestClient(create_app(no_secret)) as http2:
            res = http2.post("/v1/runs", json={"query": "q", "webhook": {"url": f"http://127.0.0.1:{p}/h"}})
            assert res.status_code == 422 and "REACTQ_WEBHOOK_SECRET" in res.text
    assert receiver.connections == 0, "the door resolves and checks; it never connects"
    r = settings_client(settings)
    assert not r.keys(f"{settings.key_prefix}*"), "nothing stored"


def settings_client(settings: Settings) -> Any:
    from reactq.shared.redisconn import client

    return client(settings)


def test_an_allowed_receiver_passes_the_door(redis_url: str, receiver: Receiver) -> None:
    settings = _settings(redis_url, allow="127.0.0.1")
    with TestClient(create_app(settings)) as http:
        res = http.post("/v1/runs", json={"query": "q", "webhook": {"url": receiver.url("/ok")}})
        assert res.status_code == 202, res.text
    assert receiver.connections == 0


def test_an_attempt_checks_the_address_again_and_connects_only_to_it(
        receiver: Receiver, resolve_as: dict[str, str]) -> None:
    # Given a name that resolved to a public address at the door and to loopback now
    url = receiver.plan("/rebound", [Plan(200)]).replace("127.0.0.1", "hooks.rebind.test")
    resolve_as["hooks.rebind.test"] = "127.0.0.1"
    d = Delivery(webhook_id="msg_run_x", type="run.done", url=url, owner_kind="run", owner_id="x", body="{}")
    # When an attempt is made without an allowlist, it is refused, final, with no connection
    answer = attempt(Settings(webhook_secret=SECRET), d)
    assert answer.refused and answer.status_code is None and "loopback" in (answer.error or "")
    assert receiver.connections == 0
    # And with the name allowed, the same attempt connects to the address it checked
    answer = attempt(Settings(webhook_secret=SECRET, webhook_allow="hooks.rebind.test"), d)
    assert answer.status_code == 200 and len(receiver.at("/rebound")) == 1
    assert receiver.at("/rebound")[0].headers["host"].startswith("hooks.rebind.test")


def test_an_attempt_without_a_secret_is_refused(receiver: Receiver) -> None:
    d = Delivery(webhook_id="msg_run_y", type="run.done", url=receiver.url("/s"), owner_kind="run",
                 owner_id="y", body="{}")
    answer = attempt(Settings(webhook_allow="127.0.0.1"), d)
    assert answer.refused and "REACTQ_WEBHOOK_SECRET" in (answer.error or "")
    assert receiver.connections == 0
    assert Keys().webhook("w") == "reactq:webhook:{w}"
