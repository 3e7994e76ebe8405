"""The HTTP API reference, from the gateway's OpenAPI document."""

from __future__ import annotations

import json
from typing import Any

from docs.gen.fields import cell

METHODS = ("get", "post", "put", "patch", "delete")


def openapi() -> dict[str, Any]:
    from reactq.dispatcher.http.app import create_app
    from reactq.shared.settings import Settings

    doc: dict[str, Any] = create_app(Settings(redis_url="redis://127.0.0.1:1/0"), keepalive=15).openapi()
    return doc


def _schema_name(content: dict[str, Any]) -> str:
    for media, body in content.items():
        ref = body.get("schema", {}).get("$ref", "")
        name = ref.rsplit("/", 1)[-1] if ref else body.get("schema", {}).get("type", "")
        return f"`{media}`" + (f" ([`{name}`](#{name.lower()}))" if ref else (f" ({name})" if name else ""))
    return ""


def _operation(path: str, method: str, op: dict[str, Any]) -> list[str]:
    summary = op.get("summary") or op.get("operationId", "")
    lines = [f"### `{method.upper()} {path}`", "", summary, ""]
    description = (op.get("description") or "").strip()
    if description:
        lines += [description, ""]
    params = op.get("parameters", [])
    if params:
        lines += ["| Parameter | In | Required | Meaning |", "|---|---|---|---|"]
        for p in params:
            lines.append(f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | "
                         f"{cell(p.get('description', '') or p.get('schema', {}).get('title', ''))} |")
        lines.append("")
    body = op.get("requestBody", {}).get("content")
    if body:
        lines += [f"Body: {_schema_name(body)}", ""]
    lines += ["| Status | Meaning | Body |", "|---|---|---|"]
    for status, resp in op.get("responses", {}).items():
        lines.append(f"| {status} | {cell(resp.get('description', ''))} | {_schema_name(resp.get('content', {}))} |")
    return lines + [""]


def _schema(name: str, schema: dict[str, Any]) -> list[str]:
    lines = [f"### {name}", ""]
    if schema.get("description"):
        lines += [cell(schema["description"]), ""]
    props = schema.get("properties", {})
    if props:
        required = set(schema.get("required", []))
        lines += ["| Field | Type | Required | Meaning |", "|---|---|---|---|"]
        for field, spec in props.items():
            typ = spec.get("type") or spec.get("$ref", "").rsplit("/", 1)[-1] or " / ".join(
                str(a.get("type") or a.get("$ref", "").rsplit("/", 1)[-1]) for a in spec.get("anyOf", []))
            lines.append(f"| `{field}` | `{cell(str(typ))}` | {'yes' if field in required else 'no'} | "
                         f"{cell(spec.get('description', ''))} |")
    return lines + [""]


def render() -> str:
    doc = openapi()
    lines = ["# HTTP API", "",
             f"{doc['info'].get('description', '')} Generated from the gateway's OpenAPI document, "
             "which a running gateway also serves at `/openapi.json` (and as pages at `/docs`).", ""]
    tags: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                tag = (item[method].get("tags") or [path.split("/")[2] if path.startswith("/v1/") else "operations"])[0]
                tags.setdefault(tag, []).append((path, method, item[method]))
    lines += ["| Method | Path | What it does |", "|---|---|---|"]
    for ops in tags.values():
        for path, method, op in ops:
            lines.append(f"| {method.upper()} | `{path}` | {cell(op.get('summary', ''))} |")
    lines.append("")
    for tag, ops in tags.items():
        lines += [f"## {tag}", ""]
        for path, method, op in ops:
            lines += _operation(path, method, op)
    lines += ["## Schemas", ""]
    for name, schema in sorted(doc.get("components", {}).get("schemas", {}).items()):
        lines += _schema(name, schema)
    return "\n".join(lines)


def openapi_json() -> str:
    return json.dumps(openapi(), indent=2, sort_keys=True) + "\n"
