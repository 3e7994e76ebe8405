"""Celery configuration and the task/queue names: what a dispatcher needs to enqueue work
without importing task or tool code (it sends by name)."""

from __future__ import annotations

from typing import Any

from kombu.entity import Queue

from reactq.shared.redisconn import broker_ssl, broker_url
from reactq.shared.settings import Settings
from reactq.workers import transport

transport.install()  # one redis client per broker channel, not one per publish (see transport.py)

RUNS_QUEUE = "reactq.runs"
TOOLS_QUEUE = "reactq.tools"
ITERATE = "reactq.iterate"
TOOL = "reactq.tool"
ANSWER = "reactq.answer"
#: Celery message priority per RunRequest.priority. kombu's Redis transport keeps one list per
#: priority step (0, 3, 6, 9 by default) and pops 0 first: interactive steps go first.
MESSAGE_PRIORITY = {"interactive": 0, "batch": 9}
#: RabbitMQ is the other way round: a priority queue delivers the highest number first.
AMQP_MESSAGE_PRIORITY = {"interactive": 9, "batch": 0}


def message_priorities(url: str) -> dict[str, int]:
    """The Celery priority of each RunRequest.priority on this broker."""
    return AMQP_MESSAGE_PRIORITY if url.startswith(("amqp://", "amqps://", "pyamqp://")) else MESSAGE_PRIORITY


#: RabbitMQ priorities 0…9 (``x-max-priority``): a queue declared without it ignores priorities.
AMQP_MAX_PRIORITY = 9


def queues(url: str) -> tuple[Queue, ...]:
    """The project's queues. On RabbitMQ they are priority queues (``x-max-priority``), so a
    higher-priority task (interactive before batch) is delivered first; kombu's Redis
    transport emulates priorities with one list per step and needs no argument. RabbitMQ
    refuses to redeclare an existing queue with other arguments: a deployment whose queues
    were declared without it deletes them once (``rabbitmqctl delete_queue``) when upgrading."""
    if url.startswith(("amqp://", "amqps://", "pyamqp://")):
        args = {"x-max-priority": AMQP_MAX_PRIORITY}
        return (Queue(RUNS_QUEUE, queue_arguments=args), Queue(TOOLS_QUEUE, queue_arguments=args))
    return (Queue(RUNS_QUEUE), Queue(TOOLS_QUEUE))


def celery_config(settings: Settings) -> dict[str, Any]:
    """Safe defaults (see ``workers/app.py`` for why each is set)."""
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
        worker_send_task_events=True,
        task_send_sent_event=True,
        task_queues=queues(url),
        task_default_queue=RUNS_QUEUE,
        task_routes={TOOL: {"queue": TOOLS_QUEUE}},
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
