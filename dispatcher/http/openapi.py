"""The gateway's OpenAPI description: FastAPI's, plus what it cannot infer.

* The schemas of the SSE frames (``reactq.shared.api.events.Event``), which the event routes'
  ``text/event-stream`` answers name.
* A bearer security scheme on every operation but the probes, so ``/docs`` has an
  *Authorize* button and sends the token with the requests it tries.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from reactq.shared.api.events import events_schema

#: Operations that answer without a token.
OPEN_OPERATIONS = ("/healthz", "/readyz")


def _add_event_schemas(schema: dict[str, Any]) -> None:
    events = events_schema()
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.update(events.pop("$defs", {}))
    components["Event"] = {**events, "title": "Event",
                           "description": "One server-sent event frame: `id`, `event` (the channel), `data`."}


def _add_security(schema: dict[str, Any]) -> None:
    schema.setdefault("components", {})["securitySchemes"] = {"bearer": {
        "type": "http", "scheme": "bearer",
        "description": "`REACTQ_API_TOKEN` or an API key; needed only when the gateway has a token set."}}
    for path, ops in schema.get("paths", {}).items():
        for op in ops.values():
            if not isinstance(op, dict):
                continue
            op["security"] = [] if path in OPEN_OPERATIONS else [{"bearer": []}]
            if path in OPEN_OPERATIONS:  # no token asked, so none refused
                for status in ("401", "403"):
                    op.get("responses", {}).pop(status, None)


def _add_implied_errors(schema: dict[str, Any]) -> None:
    """Errors every operation of a kind may answer, declared whether or not its route says so:
    any POST may meet the body limit (413) and the media-type check (415) — the middleware
    answers them before a route runs — and any id in a path may name nothing (404)."""
    ref = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
    for path, ops in schema.get("paths", {}).items():
        for method, op in ops.items():
            if not isinstance(op, dict):
                continue
            responses = op.setdefault("responses", {})
            if method == "post":
                responses.setdefault("413", {"description": "`payload_too_large`", "content": ref})
                responses.setdefault("415", {"description": "`unsupported_media_type`", "content": ref})
            if "{" in path:
                responses.setdefault("404", {"description": "`not_found`", "content": ref})


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` answer the completed description (built once)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description,
                                 routes=app.routes)
            _add_event_schemas(schema)
            _add_security(schema)
            _add_implied_errors(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
