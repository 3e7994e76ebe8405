"""Issue 10 item 8: a provider's error text never carries the API key into the run result, the
``error`` event, SSE or the worker log; HTML and truncated-JSON replies name the model and
the cause.

On the old code the 401 below put ``test-key`` (the configured key) and the ``sk-…`` /
``Bearer …`` tokens it echoes into the result and the events, and an HTML reply ended the run
with ``'str' object has no attribute 'choices'``.
"""

from __future__ import annotations

import json

import pytest

from tests.scripted_server import Reply, reply_error

pytestmark = pytest.mark.integration

LEAKY = ("Incorrect API key provided: test-key. You sent Authorization: Bearer abcdef123456xyz "
         "and sk-live-0123456789abcdef")
SECRETS = ("test-key", "abcdef123456xyz", "sk-live-0123456789abcdef")


def _everything(dispatcher, run_id: str) -> str:
    """The stored result and every published event (what SSE sends) as one text."""
    events = [e for _, e in dispatcher.handle(run_id).events(timeout=60)]
    assert events[-1].channel == "done"
    status = dispatcher.handle(run_id).status()
    return json.dumps(status, ensure_ascii=False) + "\n" + "\n".join(e.sse("0-0") for e in events)


def test_a_401_that_echoes_the_key_is_scrubbed_everywhere(workers, dispatcher, llm):
    q = llm.script(llm.unique("provider: leaky 401"), [
        reply_error(401, {"error": {"message": LEAKY, "type": "invalid_request_error"}})])
    run_id = dispatcher.submit({"query": q}).run_id
    text = _everything(dispatcher, run_id)
    assert dispatcher.handle(run_id).status()["status"] == "failed"
    assert "401" in text and "***" in text
    for secret in SECRETS:
        assert secret not in text, secret
        for w in workers:
            assert secret not in w.log.read_text(errors="replace"), (secret, w.name)


@pytest.mark.parametrize("body,ctype,cause", [
    ("<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>",
     "text/html", "HTML page"),
    ('{"id": "chatcmpl-1", "choices": [{"message": {"role": "assist', "application/json", "JSON"),
])
def test_an_html_or_truncated_reply_names_the_model_and_the_cause(workers, dispatcher, llm, body, ctype, cause):
    q = llm.script(llm.unique(f"provider: {cause}"), [Reply(raw_body=body, raw_content_type=ctype)])
    run_id = dispatcher.submit({"query": q}).run_id
    result = dispatcher.handle(run_id).result(timeout=60)
    assert result["status"] == "failed"
    assert "scripted" in str(result["error"]) and cause in str(result["error"]), result["error"]
