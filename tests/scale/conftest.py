"""The scale-out tiers (RabbitMQ, Redis Cluster, TLS, network namespaces).

Each test here carries its tier's marker and runs only when that marker is selected
(``make test-rabbitmq`` = ``-m "core or rabbitmq"``, …): the plain ``make test`` skips them
with the command that runs them (``tests/conftest.py``), so the default suite stays fast and
CI runs each tier once.
Each module starts the back end it needs (``tests/backends.py``); the helpers of
``tests/integration/conftest.py`` (scripted LLM, worker processes) are reused as classes.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.integration)
