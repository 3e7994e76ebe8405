"""The pure rules of webhooks: ids, bodies, what an answer means, when to try again."""

from __future__ import annotations

import email.utils
import json

import pytest
from pydantic import ValidationError

from reactq.shared.stores.due import Member, parse_member
from reactq.shared.requests import RunRequest, WebhookSpec
from reactq.shared.webhooks import (
    MAX_BACKOFF_S, body, due_member, judge, parse_retry_after, parse_webhook_id, retry_delay, webhook_id,
)


def test_a_webhook_id_names_its_owner_and_is_a_due_member():
    wid = webhook_id("run", "abc_1")
    assert wid == "msg_run_abc_1" and parse_webhook_id(wid) == ("run", "abc_1")
    assert parse_webhook_id("msg_nope_x") is None and parse_webhook_id("run_abc") is None
    assert parse_member(due_member(wid)) == Member("webhook", wid)


def test_the_body_is_type_timestamp_data():
    doc = json.loads(body("run.done", {"run_id": "r"}, 1_800_000_000.5))
    assert doc == {"type": "run.done", "timestamp": "2027-01-15T08:00:00.500000Z", "data": {"run_id": "r"}}


@pytest.mark.parametrize(("code", "outcome"), [
    (200, "delivered"), (204, "delivered"), (None, "retry"), (408, "retry"), (429, "retry"),
    (500, "retry"), (503, "retry"), (400, "final"), (401, "final"), (404, "final"), (410, "final"),
    (301, "final"),
])
def test_what_an_answer_means(code, outcome):
    assert judge(code).outcome == outcome


def test_retry_after_is_read_as_seconds_or_a_date():
    assert judge(429, "7").retry_after == 7.0
    assert judge(500, "7").retry_after is None  # only 429 and 503 name a wait
    now = 1_800_000_000.0
    assert parse_retry_after(email.utils.formatdate(now + 30, usegmt=True), now) == pytest.approx(30, abs=1)
    assert parse_retry_after("soon", now) is None and parse_retry_after(None, now) is None


def test_backoff_doubles_is_capped_and_jitter_only_lengthens():
    assert [retry_delay(n, 1.0, jitter=0) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert retry_delay(20, 1.0, jitter=0) == MAX_BACKOFF_S
    for n in range(1, 12):
        base = min(2 ** (n - 1), MAX_BACKOFF_S)
        assert base <= retry_delay(n, 1.0) <= base * 1.1
    assert retry_delay(1, 1.0, retry_after=5.0, jitter=0) == 5.0  # the receiver's longer wait wins
    assert retry_delay(4, 1.0, retry_after=2.0, jitter=0) == 8.0


def test_the_request_field_takes_an_http_url_and_known_events():
    req = RunRequest(query="q", webhook={"url": "https://example.com/hook"})
    assert req.webhook is not None and req.webhook.events == ["done"] and not req.webhook.wants("approval.requested")
    assert WebhookSpec(url="http://x.test/", events=["done", "approval.requested"]).wants("approval.requested")
    for bad in ({"url": "ftp://x.test/"}, {"url": "example.com"}, {"url": "http://x/", "events": ["nope"]},
                {"url": "http://x/", "events": []}, {"url": "http://x/", "secret": "s"}):
        with pytest.raises(ValidationError):
            RunRequest(query="q", webhook=bad)
