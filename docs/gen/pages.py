"""Every generated page: path under docs/ → its Markdown (or JSON)."""

from __future__ import annotations

from collections.abc import Callable

from docs.gen import ref_config, ref_events, ref_http, ref_registry

PAGES: dict[str, Callable[[], str]] = {
    "reference/configuration.md": ref_config.render,
    "reference/model-registry.md": ref_registry.render,
    "reference/http.md": ref_http.render,
    "reference/openapi.json": ref_http.openapi_json,
    "reference/events.md": ref_events.render,
}


def generate() -> dict[str, str]:
    return {path: make() for path, make in PAGES.items()}
