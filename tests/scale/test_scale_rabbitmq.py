"""RabbitMQ as the broker: what only RabbitMQ has (priority queues, its queue depth), on a vhost
of the machine's broker created for this module and deleted after it. The core scenarios run
over RabbitMQ too: ``make test-rabbitmq`` runs the integration tests marked ``core`` with
``REACTQ_TEST_BACKEND=rabbitmq``."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from reactq.shared.redisconn import free_port, start_server
from reactq.shared.settings import Settings
from reactq.shared.wire import AMQP_MAX_PRIORITY, ITERATE, RUNS_QUEUE, TOOL, TOOLS_QUEUE, WEBHOOKS_QUEUE, celery_config
from tests.backends import RabbitVhosts, rabbit_missing

pytestmark = pytest.mark.rabbitmq


@pytest.fixture(scope="module")
def vhosts() -> Iterator[RabbitVhosts]:
    missing = rabbit_missing()
    if missing:
        pytest.skip(f"RabbitMQ tier: {missing}")
    v = RabbitVhosts()
    yield v
    v.delete_all()
    listed = subprocess.run(["rabbitmqctl", "-q", "list_vhosts"], capture_output=True, text=True).stdout
    assert v.tag not in listed, "the test's vhosts are deleted"


@pytest.fixture(scope="module")
def state_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    proc = start_server(port, tmp_path_factory.mktemp("rabbit-state"))
    yield f"redis://127.0.0.1:{port}/0"
    proc.kill()
    proc.wait()


def _app(settings: Settings) -> Celery:
    app = Celery("reactq-test")
    app.conf.update(celery_config(settings))
    return app


def _declare(app: Celery) -> None:
    with app.connection_for_write() as conn:
        for q in app.amqp.queues.values():
            q(conn.default_channel).declare()


def test_the_queues_are_priority_queues_and_a_higher_priority_is_delivered_first(vhosts: RabbitVhosts) -> None:
    url = vhosts.url("prio")
    app = _app(Settings(broker_url=url))
    _declare(app)
    listed = subprocess.run(["rabbitmqctl", "-q", "list_queues", "-p", url.rsplit("/", 1)[1],
                             "name", "arguments"], capture_output=True, text=True, check=True).stdout
    for q in (RUNS_QUEUE, TOOLS_QUEUE):
        line = next(x for x in listed.splitlines() if x.startswith(q))
        assert "x-max-priority" in line and str(AMQP_MAX_PRIORITY) in line
    # No consumer: three batch-priority steps wait, then an interactive one arrives.
    for n in range(3):
        app.send_task(ITERATE, [f"batch-{n}", 0], queue=RUNS_QUEUE, priority=0)
    app.send_task(ITERATE, ["interactive", 0], queue=RUNS_QUEUE, priority=AMQP_MAX_PRIORITY)
    with app.connection_for_read() as conn:
        ch = conn.default_channel
        got = []
        for _ in range(4):
            msg = ch.basic_get(RUNS_QUEUE, no_ack=True)
            assert msg is not None
            got.append(json.loads(msg.body)[0][0])  # protocol 2: body = [args, kwargs, embed]
    assert got[0] == "interactive" and sorted(got[1:]) == ["batch-0", "batch-1", "batch-2"]


def test_queue_depth_is_read_from_rabbitmq(vhosts: RabbitVhosts, state_url: str) -> None:
    from reactq.dispatcher.http import metrics

    settings = Settings(redis_url=state_url, broker_url=vhosts.url("depth"))
    app = _app(settings)
    _declare(app)
    for n in range(5):
        app.send_task(TOOL, [f"run-{n}", 1, "c"], queue=TOOLS_QUEUE)
    app.send_task(ITERATE, ["run-x", 0], queue=RUNS_QUEUE)
    depths, unacked = metrics.queue_depths(settings)
    assert depths == {RUNS_QUEUE: 1, TOOLS_QUEUE: 5, WEBHOOKS_QUEUE: 0} and unacked is None
    body, _ = metrics.render(settings)
    text = body.decode() if isinstance(body, bytes) else body
    assert re.search(r'^reactq_queue_depth\{queue="reactq.tools"\} 5(\.0)?$', text, re.M)
    assert re.search(r'^reactq_queue_depth\{queue="reactq.runs"\} 1(\.0)?$', text, re.M)


def test_the_deployment_notes_say_how_to_set_rabbitmqs_consumer_timeout() -> None:
    """RabbitMQ closes a channel whose delivery stays unacknowledged past ``consumer_timeout``
    (30 min by default); a tool may run longer. The deploy guide says what to set."""
    text = (Path(__file__).resolve().parents[2] / "deploy" / "README.md").read_text()
    assert "consumer_timeout" in text and "x-max-priority" in text


def test_the_watchdog_reads_the_backlog_from_rabbitmq(vhosts: RabbitVhosts) -> None:
    """``workers/recovery/backlog.py`` over AMQP: ready messages counted, a queue not declared yet
    holds nothing (its 404 closes only the count's own channel: publishing goes on)."""
    from reactq.workers.recovery.backlog import broker_depth

    app = _app(Settings(broker_url=vhosts.url("backlog")))
    depth = broker_depth(app)
    assert depth(RUNS_QUEUE) == 0, "not declared yet"
    _declare(app)
    for n in range(3):
        app.send_task(ITERATE, [f"run-{n}", 0], queue=RUNS_QUEUE, priority=n)
    assert _settled(depth, RUNS_QUEUE, 3) and depth(TOOLS_QUEUE) == 0
    assert depth("reactq.nonexistent") == 0
    app.send_task(ITERATE, ["run-3", 0], queue=RUNS_QUEUE)
    assert _settled(depth, RUNS_QUEUE, 4)


def _settled(depth: Any, queue: str, want: int) -> bool:
    """Publishes without confirms reach the queue a moment after ``send_task`` returns."""
    deadline = time.monotonic() + 10
    while depth(queue) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(depth(queue) == want)
