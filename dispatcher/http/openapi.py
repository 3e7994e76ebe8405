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
            if isinstance(op, dict):
                op["security"] = [] if path in OPEN_OPERATIONS else [{"bearer": []}]


def _add_body_errors(schema: dict[str, Any]) -> None:
    """Any POST may meet the body limit (413) and the media-type check (415): the middleware
    answers them before a route runs, so every POST declares them."""
    ref = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
    for ops in schema.get("paths", {}).values():
        post = ops.get("post")
        if isinstance(post, dict):
            post["responses"].setdefault("413", {"description": "`payload_too_large`", "content": ref})
            post["responses"].setdefault("415", {"description": "`unsupported_media_type`", "content": ref})


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` answer the completed description (built once)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description,
                                 routes=app.routes)
            _add_event_schemas(schema)
            _add_security(schema)
            _add_body_errors(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
