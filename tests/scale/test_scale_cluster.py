"""State on a real 3-master Redis Cluster (started on loopback ports by this module): the store,
leases and batches work there and spread over the masters. The core scenarios (parallel tools,
interrupt, cancel, kill -9, a DAG, batches, POST /v1/runs through the gateway) run on a cluster
with ``make test-cluster`` (``REACTQ_TEST_BACKEND=cluster``)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from reactq.dispatcher.batch.store import BatchStore
from reactq.shared.keys import Keys
from reactq.shared.redisconn import client, is_cluster
from reactq.shared.settings import Settings
from reactq.shared.stores.runs import RunStore
from reactq.workers.recovery.lease import Leases
from tests.backends import RedisClusterProc, start_redis_cluster

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterProc]:
    c = start_redis_cluster(tmp_path_factory.mktemp("cluster"))
    yield c
    c.stop()


@pytest.fixture
def rc(cluster: RedisClusterProc):  # type: ignore[no-untyped-def]
    r = client(Settings(redis_url=cluster.url, redis_cluster=True))
    assert is_cluster(r)
    return r


def test_runs_spread_over_every_master_and_each_runs_keys_stay_on_one(rc) -> None:  # type: ignore[no-untyped-def]
    store, keys = RunStore(rc), Keys()
    ids = [f"spread{n}" for n in range(60)]
    for rid in ids:
        store.create(rid, {"query": "q"})
        store.add_interrupt(rid, "hi")
        store.fanin(rid, 1, "c1", 1)
        store.ledger_claim(rid, "c1", "tok", 1)
    nodes = set()
    for rid in ids:
        owners = {rc.get_node_from_key(k).name for k in
                  [*keys.run_keys(rid), keys.run_fanin(rid, 1)]}
        assert len(owners) == 1
        nodes |= owners
    assert len(nodes) == 3


def test_an_idempotency_key_on_a_cluster_returns_the_first_run_and_leaves_no_second(rc) -> None:  # type: ignore[no-untyped-def]
    store = RunStore(rc)
    assert store.create("first", {"query": "q"}, idempotency_key="same") == ("first", True)
    assert store.create("second", {"query": "q"}, idempotency_key="same") == ("first", False)
    assert not rc.exists(Keys().run("second"))
    assert rc.zscore(Keys().runs, "second") is None and rc.zscore(Keys().runs, "first")


def test_leases_on_a_cluster_back_off_and_a_dead_holder_is_seen_once(rc) -> None:  # type: ignore[no-untyped-def]
    keys = Keys("ctest:")
    leases = Leases(rc, keys, ttl_seconds=0.3, holder="me")
    with leases.hold("run:x", "reactq.iterate", ["x", None], "reactq.runs") as held:
        assert held
        time.sleep(0.5)  # the heartbeat (one call per lease on a cluster) keeps it alive
        assert leases.alive("run:x")
    # Holders that died left their records in shards all over the cluster: each takeover
    # sees (and consumes) its dead holder's record once — how the crash limit counts.
    members = [f"run:dead{n}" for n in range(20)]  # over many shards, so many nodes
    for m in members:
        rc.hset(keys.lease_tasks_for(m), m, f'{{"task": "t", "args": ["{m}"], "queue": "q"}}')
    for m in members:
        with leases.hold(m, "t", [m], "q") as held:
            assert held and leases.took_over()
        with leases.hold(m, "t", [m], "q") as held:
            assert held and not leases.took_over()


def test_unfinished_batches_are_found_on_every_master(rc) -> None:  # type: ignore[no-untyped-def]
    store = BatchStore(rc, Keys(), 3600)
    ids = [store.create([], 2) for _ in range(12)]  # 12 ids: every master holds some
    store.claim(ids[0], "me")
    store.finish(ids[1])
    assert set(store.unfinished()) == set(ids) - {ids[1]}
