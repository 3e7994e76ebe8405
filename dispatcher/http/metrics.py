"""``GET /metrics``: reactq's figures in the Prometheus text format.

``render(settings) -> (body, content_type)`` is what the gateway serves. A custom
collector reads, at scrape time:

* the ``reactq:metrics:*`` hashes the workers fill (``workers/metrics.py`` describes the
  encoding) — runs started / ended, run and turn latency, LLM call latency, errors and
  tokens by model, tool latency and errors by tool;
* ``reactq_runs_in_flight``: runs started by a worker and not yet ended;
* ``reactq_queue_depth{queue}``: messages waiting in ``reactq.runs`` / ``reactq.tools``.
  With the Redis broker that is the ``LLEN`` of kombu's list for the queue plus its
  priority lists (kombu names them ``queue + "\\x06\\x16" + step`` for the priority steps
  3, 6, 9; step 0 is the plain name), honouring ``global_keyprefix``; with an AMQP broker
  it is the message count of a passive queue declare. ``reactq_broker_unacked`` counts
  messages a Redis-broker worker has taken but not yet acknowledged (all queues).

Everything is read per scrape, in one pipelined round trip per server; nothing is cached.
The families are defined once, in ``shared/observe/metrics_schema.py``, for writer and reader.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

import redis
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from reactq.shared.keys import Keys
from reactq.shared.observe.metrics_schema import FAMILIES, INFLIGHT, Family, bucket_label  # noqa: F401
from reactq.shared.redisconn import broker_ssl, broker_url, redis_url
from reactq.shared.redisconn import client as state_client
from reactq.shared.settings import Settings
from reactq.shared.wire import RUNS_QUEUE, TOOLS_QUEUE, WEBHOOKS_QUEUE, celery_config

#: prometheus_client's float formatting for bucket bounds (untyped upstream).
_go_float = cast(Callable[[float], str], floatToGoString)

log = logging.getLogger(__name__)

QUEUES = (RUNS_QUEUE, TOOLS_QUEUE, WEBHOOKS_QUEUE)
#: kombu's Redis transport: ``queue<sep><priority>`` for the non-zero priority steps.
KOMBU_PRIORITY_SEP = "\x06\x16"
KOMBU_PRIORITY_STEPS = (3, 6, 9)
KOMBU_UNACKED_KEY = "unacked"


_clients: dict[str, redis.Redis] = {}
_lock = threading.Lock()


def _client(url: str, settings: Settings, *, state: bool) -> redis.Redis:
    """A cached client: the state Redis (``state``; it may be a cluster and carry TLS and ACL
    options), else the broker's Redis."""
    with _lock:
        client = _clients.get(url)
        if client is None:
            opts: dict[str, Any] = {"socket_timeout": 5, "socket_connect_timeout": 5}
            if state:
                client = state_client(settings, **opts)
            else:
                client = redis.Redis.from_url(url, **opts, **(broker_ssl(settings, url) or {}))
            _clients[url] = client
        return client


def is_redis_url(url: str) -> bool:
    return url.split("://", 1)[0] in ("redis", "rediss", "valkey", "valkeys", "unix")


def kombu_queue_keys(queue: str, prefix: str = "") -> list[str]:
    """The Redis lists that hold ``queue``'s messages under kombu's Redis transport."""
    return [prefix + queue] + [f"{prefix}{queue}{KOMBU_PRIORITY_SEP}{p}" for p in KOMBU_PRIORITY_STEPS]


# -- reading the workers' hashes ------------------------------------------------------

def _sum_shards(raws: list[dict[bytes, bytes]]) -> dict[bytes, bytes]:
    """One family's hashes (the shards workers write to) summed field by field."""
    if len(raws) == 1:
        return raws[0]
    total: dict[bytes, float] = {}
    for raw in raws:
        for k, v in raw.items():
            try:
                total[k] = total.get(k, 0.0) + float(v)
            except ValueError:
                continue
    return {k: repr(v).encode() for k, v in total.items()}


def _decode(raw: dict[bytes, bytes]) -> list[tuple[list[str], float]]:
    out = []
    for k, v in raw.items():
        try:
            labels = json.loads(k)
            out.append(([str(x) for x in labels], float(v)))
        except ValueError:
            continue  # not ours: never fail a scrape over one odd field
    return out


def counter_family(fam: Family, raw: dict[bytes, bytes]) -> CounterMetricFamily:
    metric = CounterMetricFamily(fam.prom_name, fam.help, labels=list(fam.labels))
    for labels, value in sorted(_decode(raw)):
        if len(labels) == len(fam.labels):
            metric.add_metric(labels, value)
    return metric


def histogram_family(fam: Family, raw: dict[bytes, bytes]) -> HistogramMetricFamily:
    """Per-bucket counts (as the workers store them) → cumulative Prometheus buckets."""
    n = len(fam.labels)
    series: dict[tuple[str, ...], dict[str, float]] = {}
    for values, value in _decode(raw):
        if len(values) == n + 1:
            series.setdefault(tuple(values[:n]), {})[values[n]] = value
    metric = HistogramMetricFamily(fam.prom_name, fam.help, labels=list(fam.labels))
    for labels, fields in sorted(series.items()):
        buckets: list[tuple[str, float]] = []
        total = 0.0
        for le in fam.buckets:
            total += fields.get(bucket_label(le), 0.0)
            buckets.append((_go_float(le), total))
        total += fields.get("+Inf", 0.0)
        buckets.append(("+Inf", total))
        metric.add_metric(list(labels), buckets, fields.get("sum", 0.0))
    return metric


# -- queue depth -----------------------------------------------------------------------

def _redis_queue_depths(url: str, prefix: str, settings: Settings) -> tuple[dict[str, int], int]:
    pipe = _client(url, settings, state=False).pipeline(transaction=False)
    for q in QUEUES:
        for key in kombu_queue_keys(q, prefix):
            pipe.llen(key)
    pipe.hlen(prefix + KOMBU_UNACKED_KEY)
    values = [int(v) for v in pipe.execute()]
    per = len(KOMBU_PRIORITY_STEPS) + 1
    depths = {q: sum(values[i * per:(i + 1) * per]) for i, q in enumerate(QUEUES)}
    return depths, values[-1]


def _amqp_queue_depths(url: str) -> dict[str, int]:
    from kombu.connection import Connection

    depths = {}
    with Connection(url, connect_timeout=5) as conn:
        channel = conn.channel()
        for q in QUEUES:
            try:
                _, count, _ = channel.queue_declare(queue=q, passive=True)
            except Exception:  # the queue does not exist yet: nothing is waiting
                channel = conn.channel()
                count = 0
            depths[q] = int(count)
    return depths


def queue_depths(settings: Settings) -> tuple[dict[str, int], int | None]:
    """``({queue: waiting messages}, unacked or None)`` from the broker."""
    url = broker_url(settings)
    if is_redis_url(url):
        opts = celery_config(settings).get("broker_transport_options") or {}
        return _redis_queue_depths(url, str(opts.get("global_keyprefix", "")), settings)
    return _amqp_queue_depths(url), None


# -- the collector ---------------------------------------------------------------------

class ReactqCollector(Collector):
    """Reads the workers' hashes and the broker at every ``collect()``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.keys = Keys(settings.key_prefix)

    def collect(self) -> Iterator[Metric]:
        client = _client(redis_url(self.settings), self.settings, state=True)
        pipe = client.pipeline(transaction=False)
        families = list(FAMILIES.values())
        per = len(self.keys.metrics_all(INFLIGHT))
        for fam in families:
            for key in self.keys.metrics_all(fam.name):
                pipe.hgetall(key)
        for key in self.keys.metrics_all(INFLIGHT):
            pipe.hlen(key)
        pipe.zcard(self.keys.approvals_pending)
        values = pipe.execute()
        pending = values.pop()
        inflight = sum(values[len(families) * per:])
        raws = [_sum_shards(values[i * per:(i + 1) * per]) for i in range(len(families))]
        for fam, raw in zip(families, raws, strict=True):
            yield counter_family(fam, raw) if fam.kind == "counter" else histogram_family(fam, raw)
        yield GaugeMetricFamily("reactq_runs_in_flight",
                                "Runs started by a worker that have not ended yet.", value=inflight)
        yield GaugeMetricFamily("reactq_approvals_pending",
                                "Approvals waiting for a person's decision, every run.", value=pending)
        yield from self._queues()

    def _queues(self) -> Iterator[Metric]:
        try:
            depths, unacked = queue_depths(self.settings)
        except Exception as exc:  # a broker problem must not hide the other figures
            log.warning("queue depth unavailable: %s", exc)
            yield GaugeMetricFamily("reactq_broker_up", "1 when the broker answered this scrape.",
                                    value=0)
            return
        yield GaugeMetricFamily("reactq_broker_up", "1 when the broker answered this scrape.", value=1)
        depth = GaugeMetricFamily("reactq_queue_depth", "Messages waiting in a reactq queue.",
                                  labels=["queue"])
        for q, n in depths.items():
            depth.add_metric([q], n)
        yield depth
        if unacked is not None:
            yield GaugeMetricFamily(
                "reactq_broker_unacked",
                "Messages taken by workers and not yet acknowledged (Redis broker, all queues).",
                value=unacked)


def render(settings: Settings | None = None) -> tuple[bytes, str]:
    """The Prometheus text exposition of reactq's metrics, and its content type."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ReactqCollector(settings or Settings()))
    return generate_latest(registry), CONTENT_TYPE_LATEST


def snapshot(settings: Settings | None = None) -> dict[str, Any]:
    """The same figures as plain data: ``{sample name: {label tuple: value}}`` (for tests, CLI)."""
    out: dict[str, Any] = {}
    for metric in ReactqCollector(settings or Settings()).collect():
        for s in metric.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out
