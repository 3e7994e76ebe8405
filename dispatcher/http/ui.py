"""``/ui``: the run viewer, static files shipped in the package, a router the gateway includes.

The page and its script hold no data, so they load without the token (the gateway's
``KeyAuth`` leaves ``/ui`` open); everything they show comes from the API with the
token the user typed (kept in ``sessionStorage``, sent as ``Authorization: Bearer``, never
in a URL). ``GET /v1/ui/config`` (behind the token like every API route) tells the page
whether a Flower URL is configured (``REACTQ_FLOWER_URL``). ``GET /v1/ui/dashboard`` is the
runs page's dashboard, computed here from what the workers record (the run index, the
metrics hashes, the broker's queues), so a page opened at any time shows the last hour.
"""

from __future__ import annotations

import asyncio
import logging
import time
from importlib import resources
from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from reactq.dispatcher.http.auth import Caller, need
from reactq.dispatcher.http.errors import responses
from reactq.dispatcher.http.gateway import Gateway, GatewayDep
from reactq.shared.api.ops import Dashboard, UiConfig
from reactq.shared.observe.dashboard import build
from reactq.shared.stores.dashboard import DashboardStore

__all__ = ["router"]

log = logging.getLogger(__name__)
router = APIRouter(tags=["ui"])
_TYPES = {"html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8",
          "css": "text/css; charset=utf-8", "svg": "image/svg+xml"}
_FILES = ("index.html", "app.css", "core.js", "runs.js", "approvals.js", "run.js", "fork.js", "batch.js", "dag.js",
          "eval.js", "app.js")
# The page may load nothing from elsewhere and run no inline script.
_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'")


def _read(name: str) -> bytes:
    return resources.files("reactq.dispatcher.ui").joinpath(name).read_bytes()


def _static(name: str) -> Response:
    ext = name.rsplit(".", 1)[-1]
    return Response(_read(name), media_type=_TYPES[ext],
                    headers={"Cache-Control": "no-cache", "Content-Security-Policy": _CSP,
                             "X-Content-Type-Options": "nosniff"})


@router.get("/ui", include_in_schema=False)
def ui_root() -> Any:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui/", include_in_schema=False)
def ui_index() -> Any:
    return _static("index.html")


@router.get("/ui/{name}", include_in_schema=False)
def ui_file(name: str) -> Any:
    if name not in _FILES:
        # Any other path is a page of the single-page app (deep links such as /ui/run/…
        # are not used: pages live in the #fragment), so unknown names are 404s.
        return Response("not found", status_code=404, media_type="text/plain")
    return _static(name)


@router.get("/v1/ui/config", response_model=UiConfig)
def ui_config(request: Request) -> Any:
    """What the viewer needs to know about this deployment (no secrets)."""
    gateway = getattr(request.app.state, "gateway", None)
    flower = gateway.settings.flower_url if gateway is not None else None
    auth = bool(gateway is not None and gateway.settings.api_token)
    return {"flower_url": flower, "auth": auth}


@router.get("/v1/ui/dashboard", response_model=Dashboard, responses=responses(503))
async def ui_dashboard(gw: GatewayDep, caller: Annotated[Caller, need("runs:read")]) -> Any:
    """The last hour's runs per minute, runs by status, tokens; for an admin also the queue
    depth, the runs in flight and the turn-time percentiles (cluster-wide figures)."""
    return await asyncio.to_thread(_dashboard, gw, None if caller.admin else caller.tenant, caller.admin)


def _dashboard(gw: Gateway, tenant: str | None, admin: bool) -> dict[str, Any]:
    now = time.time()
    reading = DashboardStore(gw.dispatcher.redis, gw.keys).read(now, tenant=tenant, cluster=admin)
    return build(reading.points, now, truncated=reading.truncated, turn_buckets=reading.turn_buckets,
                 in_flight=reading.in_flight, queues=_queues(gw) if admin else None)


def _queues(gw: Gateway) -> dict[str, int] | None:
    from reactq.dispatcher.http.metrics import queue_depths

    try:
        return queue_depths(gw.settings)[0]
    except Exception as exc:  # a broker problem must not hide the other figures
        log.warning("queue depth unavailable: %s", exc)
        return None
