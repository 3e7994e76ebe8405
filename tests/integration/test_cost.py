"""Every call a run was billed for is in its ``done.usage``, priced in dollars: real workers,
the scripted LLM's reported usage, a registry entry with a ``price``."""

from __future__ import annotations


from collections.abc import Iterator
from typing import Any

import pytest

from reactq.dispatcher.http.metrics import snapshot
from reactq.shared.requests import RunRequest
from tests.integration.flow_kit import FlowCluster
from tests.scripted_server import reply_text, reply_tool_calls
from tests.metrics_kit import settled

pytestmark = pytest.mark.integration

PRICE = "{ input_per_mtok = 2.5, output_per_mtok = 10.0, cached_input_per_mtok = 1.25 }"
TURN1 = {"prompt_tokens": 1000, "completion_tokens": 40, "total_tokens": 1040,
         "prompt_tokens_details": {"cached_tokens": 600}}
TURN2 = {"prompt_tokens": 1200, "completion_tokens": 10, "total_tokens": 1210}
SYNTH = {"prompt_tokens": 3000, "completion_tokens": 250, "total_tokens": 3250}


@pytest.fixture(scope="module")
def cluster(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlowCluster]:
    c = FlowCluster(redis_url, tmp_path_factory.mktemp("cost"), limits={"price": PRICE}, workers=1)
    yield c
    c.close()


def _cost_metric(c: FlowCluster) -> dict[Any, float]:
    return dict(snapshot(c.settings).get("reactq_cost_usd_total", {}))


def test_done_usage_is_every_billed_call_priced_to_the_fraction_of_a_cent(cluster: FlowCluster) -> None:
    q = cluster.book.script("cost: what is 6*7?", [
        reply_tool_calls([("c1", "calculator", {"expression": "6*7"})], usage=TURN1),
        reply_text("42", usage=TURN2),
    ], synthesis=reply_text("It is 42.", usage=SYNTH))
    before = _cost_metric(cluster)
    result = cluster.d.submit(RunRequest(query=q, mode="native")).result(timeout=30)
    assert result["status"] == "succeeded"
    usage = result["usage"]
    # The two loop turns and the streamed synthesis: everything the provider billed.
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["llm_calls"]) == (5200, 300, 3)
    assert usage["cached_tokens"] == 600
    # (400 × 2.5 + 600 × 1.25 + 40 × 10) + (1200 × 2.5 + 10 × 10) + (3000 × 2.5 + 250 × 10)
    # = 2150 + 3100 + 10000 micro-dollars
    assert usage["cost_usd"] == 0.01525
    key = (("model", "scripted"), ("tenant", "default"))
    after = settled(lambda: _cost_metric(cluster), lambda after: after.get(key, 0.0) != before.get(key, 0.0))
    assert after.get(key, 0.0) - before.get(key, 0.0) == pytest.approx(0.01525, abs=1e-12)
