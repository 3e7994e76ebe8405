"""Schemathesis against the live gateway (``make test-fuzz``): every operation of
``/openapi.json`` is called with generated requests, valid and invalid, and each answer must
pass the stateless checks: no server error, the status code is one the operation declares,
the body matches the declared schema (the one error shape for every 4xx/5xx), and the
content type is the declared one.

The gateway is a real uvicorn process (with a token) over the test Redis and the session's
workers, so generated runs, DAGs and batches really are queued and run. The number of
examples per operation is bounded (``FUZZ_EXAMPLES``); the summary line gives operations,
cases and failures.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.integration.conftest import worker_env
from tests.integration.test_gateway import Gateway, start_gateway, stop_gateway


@schemathesis.serializer("application/x-ndjson")
def _ndjson(ctx: Any, value: Any) -> bytes:
    """A batch's JSONL body: the generated value as it is (a string) or one JSON line."""
    if isinstance(value, bytes):
        return value
    return value.encode() if isinstance(value, str) else json.dumps(value).encode()

pytestmark = [pytest.mark.integration, pytest.mark.fuzz]

TOKEN = "fuzz-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: Generated requests per operation (bounded: the tier runs in CI).
FUZZ_EXAMPLES = int(os.environ.get("REACTQ_FUZZ_EXAMPLES", "40"))
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance, content_type_conformance]


@pytest.fixture(scope="module")
def gateway(redis_url: str, llm: Any, workers: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    env = worker_env(redis_url, llm, REACTQ_API_TOKEN=TOKEN, REACTQ_SSE_KEEPALIVE="0.5")
    gw = start_gateway(env, tmp_path_factory.mktemp("fuzz") / "gateway.log", via_cli=False)
    yield gw
    stop_gateway(gw)


@dataclass
class Tally:
    operations: int = 0
    cases: int = 0
    failures: list[str] = field(default_factory=list)


def _fuzz(operation: Any, base_url: str, tally: Tally) -> None:
    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, derandomize=True,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy())
    def run(case: Any) -> None:
        tally.cases += 1
        case.call_and_validate(base_url=base_url, headers=AUTH, checks=CHECKS, timeout=30)

    try:
        run()
    except Exception as exc:  # every failure of every operation is reported, not only the first
        tally.failures.append(f"{operation.label}: {str(exc)[:1500]}")


@pytest.mark.timeout(900)  # ≈ 1,000 requests, some of them queueing real runs
def test_every_operation_passes_the_stateless_checks(gateway: Gateway) -> None:
    schema = schemathesis.openapi.from_url(f"{gateway.url}/openapi.json")
    tally = Tally()
    for result in schema.get_all_operations():
        operation = result.ok()
        tally.operations += 1
        _fuzz(operation, gateway.url, tally)
    summary = f"schemathesis: {tally.operations} operations, {tally.cases} cases, {len(tally.failures)} failures"
    print(summary)
    assert tally.operations >= 25 and tally.cases >= tally.operations
    assert not tally.failures, summary + "\n\n" + "\n\n".join(tally.failures)
