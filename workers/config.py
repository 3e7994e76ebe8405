"""Celery configuration and the task/queue names: what a dispatcher needs to enqueue work
without importing task or tool code (it sends by name)."""

from __future__ import annotations

from typing import Any

from kombu import Queue

from reactq.shared.redisconn import broker_url
from reactq.shared.settings import Settings

RUNS_QUEUE = "reactq.runs"
TOOLS_QUEUE = "reactq.tools"
ITERATE = "reactq.iterate"
TOOL = "reactq.tool"
ANSWER = "reactq.answer"
#: Celery message priority per RunRequest.priority. kombu's Redis transport keeps one list per
#: priority step (0, 3, 6, 9 by default) and pops 0 first: interactive steps go first.
MESSAGE_PRIORITY = {"interactive": 0, "batch": 9}


def celery_config(settings: Settings) -> dict[str, Any]:
    """Safe defaults (see ``workers/app.py`` for why each is set)."""
    return dict(
        broker_url=broker_url(settings),
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
        task_queues=(Queue(RUNS_QUEUE), Queue(TOOLS_QUEUE)),
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
