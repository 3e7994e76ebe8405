"""Flow-control metrics (families in ``shared/stores/metrics_schema.py``): waits, provider 429s,
reserved vs reported tokens, budget stops. Written like every worker metric (Redis hashes,
rendered by the gateway's ``/metrics``); recording never raises."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from reactq.workers.metrics import Recorder

if TYPE_CHECKING:
    from reactq.workers.runtime import Runtime


def recorder(rt: Runtime) -> Callable[[str, dict[str, Any]], None]:
    rec = Recorder(rt.redis, rt.keys)

    def on_event(kind: str, f: dict[str, Any]) -> None:
        b = rec.batch()
        if kind == "wait":
            b.observe("flow_wait_seconds", [f["model"], f["priority"]], float(f["seconds"]))
        elif kind == "provider_429":
            b.inc("flow_provider_429", [f["model"], str(f["status"])])
        elif kind == "settle":
            b.inc("flow_tokens", [f["model"], "reserved"], int(f["reserved"]))
            b.inc("flow_tokens", [f["model"], "actual"], int(f["actual"]))
        b.flush()

    return on_event


def budget_stop(rt: Runtime, scope: str, n: int = 1) -> None:
    Recorder(rt.redis, rt.keys).batch().inc("flow_budget_stops", [scope], n).flush()
