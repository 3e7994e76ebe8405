"""A worker keeps its liveness file fresh (REACTQ_WORKER_ALIVE_FILE), for the probes in deploy/."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_a_running_worker_touches_its_liveness_file_every_few_seconds(worker_factory, tmp_path: Path) -> None:
    alive = tmp_path / "probe" / "alive"
    worker_factory.start("alive", concurrency=1, REACTQ_WORKER_ALIVE_FILE=str(alive))
    deadline = time.monotonic() + 10
    while not alive.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive.exists(), "the ready worker did not create its liveness file"
    first = alive.stat().st_mtime
    # Touched on every heartbeat (2 s): watched until it is, for at most 5 s.
    deadline = time.monotonic() + 5
    while alive.stat().st_mtime <= first and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive.stat().st_mtime > first, "the file was not touched again within 5 s"
    assert time.time() - alive.stat().st_mtime < 5
