"""The wire between the two sides: task names, queue names, message priorities and the Celery
configuration, in the one module both the dispatcher and the workers import.

The dispatcher enqueues by task name (``send_task``) with these names and this
configuration, so a gateway host never imports worker, tool or hook code
(``tests/unit/test_layering.py``); the workers register their tasks under the same names
(``workers/runs/tasks.py``, ``workers/dags/tasks.py``).

What each task does is in ``workers/runs/tasks.py`` (a run's) and ``workers/dags/tasks.py`` (a DAG's).
"""

from __future__ import annotations

from typing import Any

from kombu.entity import Queue

from reactq.shared import transport
from reactq.shared.redisconn import broker_ssl, broker_url
from reactq.shared.settings import Settings

RUNS_QUEUE = "reactq.runs"
TOOLS_QUEUE = "reactq.tools"
#: A worker's own queue for tool calls handed on to it by workers lacking their tool
#: (``workers/runs/handon.py``); consumed beside ``reactq.tools``.
HANDON_QUEUE_PREFIX = "reactq.tools.@"
#: Webhook deliveries: their own queue, so a slow receiver never holds a run's worker slot.
WEBHOOKS_QUEUE = "reactq.webhooks"

#: What a worker consumes unless told otherwise (``reactq worker`` and the local workers).
DEFAULT_QUEUES = f"{RUNS_QUEUE},{TOOLS_QUEUE},{WEBHOOKS_QUEUE}"


def handon_queue(node: str) -> str:
    """The hand-on queue of the worker named ``node``."""
    return f"{HANDON_QUEUE_PREFIX}{node}"


# -- a run's tasks ---------------------------------------------------------------------------
ITERATE = "reactq.iterate"
TOOL = "reactq.tool"
ANSWER = "reactq.answer"

# -- webhooks -------------------------------------------------------------------------------
#: One delivery attempt of one webhook message (args: webhook_id); see ``workers/webhooks.py``.
WEBHOOK = "reactq.webhook"

# -- a DAG's tasks ---------------------------------------------------------------------------
DAG_START = "reactq.dag.start"
DAG_PLAN = "reactq.dag.plan"
#: Sent when a run that is a DAG step ends (its request metadata carries ``_dag``).
DAG_STEP_DONE = "reactq.dag.step_done"
DAG_ADVANCE = "reactq.dag.advance"
DAG_ANALYZE = "reactq.dag.analyze"
DAG_ANSWER = "reactq.dag.answer"
#: The watchdog's way back into a DAG whose worker died (the DAG lease's resend spec).
DAG_RESUME = "reactq.dag.resume"

#: Celery message priority per RunRequest.priority. kombu's Redis transport keeps one list per
#: priority step (0, 3, 6, 9 by default) and pops 0 first: interactive steps go first.
MESSAGE_PRIORITY = {"interactive": 0, "batch": 9}
#: RabbitMQ is the other way round: a priority queue delivers the highest number first.
AMQP_MESSAGE_PRIORITY = {"interactive": 9, "batch": 0}
#: RabbitMQ priorities 0…9 (``x-max-priority``): a queue declared without it ignores priorities.
AMQP_MAX_PRIORITY = 9


def _amqp(url: str) -> bool:
    return url.startswith(("amqp://", "amqps://", "pyamqp://"))


def message_priorities(url: str) -> dict[str, int]:
    """The Celery priority of each RunRequest.priority on this broker."""
    return AMQP_MESSAGE_PRIORITY if _amqp(url) else MESSAGE_PRIORITY


def queues(url: str) -> tuple[Queue, ...]:
    """The project's queues. On RabbitMQ they are priority queues (``x-max-priority``), so a
    higher-priority task (interactive before batch) is delivered first; kombu's Redis
    transport emulates priorities with one list per step and needs no argument. RabbitMQ
    refuses to redeclare an existing queue with other arguments: a deployment whose queues
    were declared without it deletes them once (``rabbitmqctl delete_queue``) when upgrading."""
    if _amqp(url):
        args = {"x-max-priority": AMQP_MAX_PRIORITY}
        return (Queue(RUNS_QUEUE, queue_arguments=args), Queue(TOOLS_QUEUE, queue_arguments=args),
                Queue(WEBHOOKS_QUEUE))
    return (Queue(RUNS_QUEUE), Queue(TOOLS_QUEUE), Queue(WEBHOOKS_QUEUE))


def celery_config(settings: Settings) -> dict[str, Any]:
    """Safe defaults (see ``workers/app.py`` for why each is set). A Celery app configured
    with it publishes and consumes through :mod:`reactq.shared.transport` on Redis URLs."""
    transport.install()  # one redis client per broker channel, not one per publish
    url = broker_url(settings)
    return dict(
        broker_url=url,
        broker_use_ssl=broker_ssl(settings, url),
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        event_serializer="json",
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # Task events cost a bare task ≈ 30 % of its CPU: sent only while a monitor listens
        # (``auto``: ``reactq.workers.monitoring``), or always (``on``).
        worker_send_task_events=settings.task_events == "on",
        task_send_sent_event=settings.task_events == "on",
        task_queues=queues(url),
        task_default_queue=RUNS_QUEUE,
        task_routes={TOOL: {"queue": TOOLS_QUEUE}, WEBHOOK: {"queue": WEBHOOKS_QUEUE}},
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout,
            # kombu restores unacked messages lazily; check every second so that a
            # whole-worker crash is recovered about one visibility timeout later even
            # without reactq's own leases.
            "unacked_restore_interval": 1,
        },
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        enable_utc=True,
    )
