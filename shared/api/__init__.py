"""The HTTP API's bodies as pydantic models: what every route answers, its error shape and
its server-sent events. Pure pydantic (no web framework), shared by the gateway, which
declares them on its routes (so ``/openapi.json`` describes them), and by clients.

* ``errors``: ``ErrorResponse`` (``{"error": {code, message, field?, details?}}``), the codes.
* ``runs``: ``RunCreated`` | ``ThreadInjected``, ``RunStatus``, ``RunPage``, interrupts, cancel.
* ``dags``: DAG and batch bodies and listings.
* ``ops``: probes, catalog, threads, the viewer's config.
* ``events``: ``Event``, the union of SSE frames, and each channel's payload.
"""

from __future__ import annotations

from reactq.shared.api.dags import (
    BatchCancelling,
    BatchCreated,
    BatchPage,
    BatchRow,
    BatchStatus,
    DagCancelling,
    DagCreated,
    DagPage,
    DagRow,
    DagStatus,
)
from reactq.shared.api.errors import ERROR_CODES, ErrorCode, ErrorInfo, ErrorResponse
from reactq.shared.api.events import Event, parse_event
from reactq.shared.api.ops import Health, ModelCatalog, Readiness, ThreadView, ToolCatalog, UiConfig
from reactq.shared.api.runs import (
    InterruptAccepted,
    InterruptIn,
    RunCancelling,
    RunCreated,
    RunPage,
    RunRow,
    RunStatus,
    ThreadInjected,
)

__all__ = [
    "ERROR_CODES", "BatchCancelling", "BatchCreated", "BatchPage", "BatchRow", "BatchStatus",
    "DagCancelling", "DagCreated", "DagPage", "DagRow", "DagStatus", "ErrorCode", "ErrorInfo",
    "ErrorResponse", "Event", "Health", "InterruptAccepted", "InterruptIn", "ModelCatalog",
    "Readiness", "RunCancelling", "RunCreated", "RunPage", "RunRow", "RunStatus", "ThreadInjected",
    "ThreadView", "ToolCatalog", "UiConfig", "parse_event",
]
