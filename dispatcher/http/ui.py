"""``/ui``: the run viewer, static files shipped in the package, a router the gateway includes.

The page and its script hold no data, so they load without the token (the gateway's
``KeyAuth`` leaves ``/ui`` open); everything they show comes from the API with the
token the user typed (kept in ``sessionStorage``, sent as ``Authorization: Bearer``, never
in a URL). ``GET /v1/ui/config`` (behind the token like every API route) tells the page
whether a Flower URL is configured (``REACTQ_FLOWER_URL``).
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from reactq.shared.api.ops import UiConfig

__all__ = ["router"]

router = APIRouter(tags=["ui"])
_TYPES = {"html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8",
          "css": "text/css; charset=utf-8", "svg": "image/svg+xml"}
_FILES = ("index.html", "app.css", "core.js", "runs.js", "approvals.js", "run.js", "batch.js", "dag.js", "app.js")
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
