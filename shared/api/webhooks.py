"""The bodies of the webhook delivery-log routes (``GET /v1/runs/{id}/webhooks`` and the
DAG's and batch's)."""

from __future__ import annotations

from typing import Literal

from reactq.shared.api.base import ApiModel


class Delivery(ApiModel):
    """One webhook message and how its delivery stands."""

    webhook_id: str
    """The ``webhook-id`` header, the same on every attempt."""
    type: str
    """``run.done``, ``dag.done``, ``batch.done`` or ``approval.requested``."""
    tenant: str
    """The tenant of the run, DAG or batch it is about (the only one that reads it)."""
    status: Literal["pending", "delivered", "failed"]
    attempts: int
    last_status_code: int | None
    """The receiver's last HTTP status (None: no answer, or not tried yet)."""
    next_attempt_at: float | None
    """When the next attempt is due (Unix seconds) while a retry waits."""
    last_error: str | None = None


class Deliveries(ApiModel):
    deliveries: list[Delivery]
    """Oldest first."""
