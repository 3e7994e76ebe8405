"""Workers on other network hosts (root only): Redis, the gateway and two worker hosts each in a
network namespace of their own, joined by veth links to one bridge (``bench/faults/netns.py``).
One worker host is partitioned mid-tool, its processes left running, then healed. The same
scenario publishes its figures in the fault suite (``python -m bench.faults partition``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.faults.f_partition import LEASE_S, Partition
from bench.faults.netns import netns_missing

pytestmark = [pytest.mark.netns, pytest.mark.timeout(300)]


@pytest.fixture
def partition(tmp_path: Path) -> Iterator[Partition]:
    missing = netns_missing()
    if missing:
        pytest.skip(f"netns tier: {missing}")
    p = Partition(tmp_path)
    try:
        p.start()
        yield p
    finally:
        p.close()


def test_a_partitioned_worker_host_loses_nothing_repeats_nothing_and_rejoins(partition: Partition) -> None:
    fig = partition.scenario()
    print("partition figures:", fig)
    assert fig["fanout_workers"] == 2, "one run's tools ran on both hosts"
    assert fig["run_status"] == "succeeded" and fig["calls_cut_off"] >= 1
    assert fig["resume_s"] is not None and fig["resume_s"] <= LEASE_S + 5, "resumed on the other host"
    assert fig["ledger_duplicates"] == 0 and fig["duplicate_tool_events"] == 0
    assert fig["late_writes_refused"] == fig["calls_cut_off"], "every late result refused by the CAS"
    assert fig["rejoined_s"] is not None, "the healed host takes work again by itself"
