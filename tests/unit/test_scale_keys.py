"""Hash-tagged keys (Redis Cluster) and the cluster/TLS configuration refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.crc import key_slot

from reactq.shared.errors import ConfigError
from reactq.shared.keys import LEASE_SHARDS, Keys
from reactq.shared.redisconn import broker_url, connection_options
from reactq.shared.settings import Settings

K = Keys()


def _slot(key: str) -> int:
    return int(key_slot(key.encode()))


def test_every_key_of_one_run_dag_or_batch_is_in_the_slot_of_its_id() -> None:
    run = [K.run("abc"), K.run_events("abc"), K.run_interrupts("abc"), K.run_tools("abc"),
           K.run_fanin("abc", 7), *K.run_keys("abc")]
    assert {_slot(k) for k in run} == {_slot("{abc}")}
    assert K.run("abc") == "reactq:run:{abc}" and K.run_events("abc") == "reactq:run:{abc}:events"
    assert {_slot(k) for k in (K.dag("d1"), K.dag_events("d1"), K.dag_interrupts("d1"))} == {_slot("{d1}")}
    assert {_slot(K.batch("b1")), _slot(K.batch_driver("b1"))} == {_slot("{b1}")}
    assert K.batch_id_of(K.batch("b1")) == "b1" and K.batch_id_of(K.batch_driver("b1")) is None


def test_a_lease_and_its_shard_structures_share_a_slot_and_shards_spread() -> None:
    for member in ("run:abc", "tool:abc:call_1", "dag:d1"):
        keys = [K.lease(member), K.lease_tasks_for(member)]
        assert len({_slot(k) for k in keys}) == 1
        assert K.lease(member).startswith(K.lease_held_prefix(K.lease_shard(member)))
    slots = {_slot(K.lease_tasks_of(n)) for n in range(LEASE_SHARDS)}
    assert len(slots) == LEASE_SHARDS, "each shard is its own slot, so shards spread over masters"


def test_a_cluster_needs_a_url_naming_one_of_its_nodes() -> None:
    from reactq.shared.redisconn import client

    with pytest.raises(ConfigError, match="REACTQ_REDIS_URL"):
        client(Settings(redis_cluster=True))


def test_a_cluster_needs_a_broker_of_its_own() -> None:
    url = "redis://10.0.0.1:7000/0"
    with pytest.raises(ConfigError, match="REACTQ_BROKER_URL"):
        broker_url(Settings(redis_url=url, redis_cluster=True))
    with pytest.raises(ConfigError, match="REACTQ_BROKER_URL"):
        broker_url(Settings(redis_url=url, redis_cluster=True, broker_url="redis://10.0.0.1:7000/1"))
    amqp = "amqp://guest:guest@10.0.0.9:5672/reactq"
    assert broker_url(Settings(redis_url=url, redis_cluster=True, broker_url=amqp)) == amqp
    assert broker_url(Settings(redis_url=url, redis_cluster=True,
                               broker_url="redis://10.0.0.2:6379/0")) == "redis://10.0.0.2:6379/0"


def test_tls_and_acl_options(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("x")
    with pytest.raises(ConfigError, match="rediss://"):
        connection_options(Settings(redis_url="redis://h:1/0", redis_ca_file=ca), "redis://h:1/0")
    with pytest.raises(ConfigError, match="no such file"):
        connection_options(Settings(redis_ca_file=tmp_path / "nope"), "rediss://h:1/0")
    s = Settings(redis_url="rediss://h:1/0", redis_ca_file=ca, redis_username="app",
                 redis_password="s3cr/t")
    assert connection_options(s, "rediss://h:1/0") == {
        "ssl_ca_certs": str(ca), "username": "app", "password": "s3cr/t"}
    # The broker falls back to the same server, with the ACL user (URL-quoted).
    assert broker_url(s) == "rediss://app:s3cr%2Ft@h:1/0"


def test_metric_shards_written_by_many_workers_are_summed_by_the_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each worker increments its own shard of a family (no hot hash on a cluster); the
    gateway's scrape sums the shards and the unsharded hash older workers wrote."""
    import fakeredis

    from reactq.dispatcher.http import metrics as reader
    from reactq.workers.metrics import Recorder

    r = fakeredis.FakeRedis()
    owners = [f"host:{pid}" for pid in range(40)]
    recs = [Recorder(r, K, owner=o) for o in owners]
    assert len({rec.shard for rec in recs}) > 1
    for rec in recs:
        rec.batch().inc("runs_started", ["native"]).observe("run_seconds", ["succeeded"], 0.2).flush()
    for rec in recs:
        rec.sums.flush()  # what a worker's background thread does every second
    r.hincrby(K.metrics("runs_started"), '["native"]', 2)  # an unsharded, older writer
    # Per-run gauges shard by run id: another worker finds (and removes) what one wrote.
    recs[0].batch().hset("inflight", "run-a", "1.0").hset("inflight", "run-b", "1.0").flush()
    recs[1].batch().hdel("inflight", "run-a").flush()
    monkeypatch.setattr(reader, "_client", lambda *a, **k: r)
    snap = reader.snapshot(Settings(redis_url="redis://unused:1/0"))
    assert snap["reactq_runs_started_total"][(("mode", "native"),)] == 42
    assert snap["reactq_run_seconds_count"][(("status", "succeeded"),)] == 40
    assert snap["reactq_runs_in_flight"][()] == 1
