"""Test-wide settings: no test can reach a real model endpoint; a scale tier's tests run with
their tier only."""

from __future__ import annotations

import os
from typing import Any

import pytest

import reactq.shared.llm.base as llm_base

# Only loopback endpoints (the scripted server, a local model) are allowed in tests.
llm_base.ALLOW_REAL_LLM = False

# Tests never touch the machine's own Redis or a developer's configuration.
for _var in ("REACTQ_REDIS_URL", "REACTQ_BROKER_URL", "REACTQ_REDIS_CLUSTER", "REACTQ_MODELS", "REACTQ_TOOLS", "REACTQ_HOOKS"):
    os.environ.pop(_var, None)


#: The scale-out tiers: a test marked with one runs when its marker is selected
#: (``make test-rabbitmq`` = ``-m "core or rabbitmq"``, …), wherever it lives.
TIERS = ("rabbitmq", "cluster", "tls", "netns")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    selected = config.getoption("markexpr") or ""
    for item in items:
        tier = next((t for t in TIERS if item.get_closest_marker(t)), None)
        if tier is not None and tier not in selected:
            item.add_marker(pytest.mark.skip(reason=f"the {tier} tier runs with `make test-{tier}`"))


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``make test`` (``-n 2 --dist loadfile``): a file at a time per process, except the
    local-model tier (tests/e2e), whose files share session fixtures (two model servers, a
    worker) that must start once, in one process, as in a run without xdist."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileOrTier(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return "tests/e2e" if scope.startswith("tests/e2e/") else scope

    return FileOrTier(config, log)
