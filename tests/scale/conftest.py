"""The scale-out tiers (RabbitMQ, Redis Cluster, TLS, network namespaces).

Each test here carries its tier's marker and runs only when that marker is selected
(``make test-rabbitmq`` = ``-m "core or rabbitmq"``, …): the plain ``make test`` skips them
with the command that runs them, so the default suite stays fast and CI runs each tier once.
Each module starts the back end it needs (``tests/backends.py``); the helpers of
``tests/integration/conftest.py`` (scripted LLM, worker processes) are reused as classes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TIERS = ("rabbitmq", "cluster", "tls", "netns")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    selected = config.getoption("markexpr") or ""
    for item in items:
        if not Path(str(item.fspath)).is_relative_to(here):
            continue
        item.add_marker(pytest.mark.integration)
        tier = next((t for t in TIERS if item.get_closest_marker(t)), None)
        if tier is not None and tier not in selected:
            item.add_marker(pytest.mark.skip(reason=f"the {tier} tier runs with `make test-{tier}`"))
