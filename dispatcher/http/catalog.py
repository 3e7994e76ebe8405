"""Catalog routes of the HTTP gateway: ``GET /v1/tools`` and ``GET /v1/models``.

Both read ``reactq:catalog``, the hash the workers publish when they start (the last worker
to start wins), so the gateway never imports tool code nor connects to MCP servers:

* ``GET /v1/tools`` → ``{"tools": [{name, description, parameters, idempotent, …}],
  "published": bool}``; MCP tools carry ``mcp_server``.
* ``GET /v1/models`` → ``{"models": [{name, model, base_url, roles, abilities, …}],
  "published": bool}``.

``GET /v1/models?use=true`` adds each model's current use under flow control (``use``: last
60 s, in flight, waiting, paused), the figures ``GET /v1/flow/models`` (deprecated) shows.

``published`` is false (and the lists empty) before any worker has started. Nothing secret is
in the catalog: model entries name the environment variable of their key
(``api_key_env``), never the key, and a ``base_url`` is shown without user info or query.
Authentication is the gateway's middleware.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis
from fastapi import APIRouter, Query, Request

from reactq.shared.api.ops import ModelCatalog, ToolCatalog
from reactq.shared.keys import Keys
from reactq.shared.redisconn import redis_url
from reactq.shared.settings import Settings
from reactq.shared.stores.toolsets import parse_toolsets

__all__ = ["router"]

router = APIRouter(tags=["catalog"])


async def _catalog(request: Request, field: str) -> tuple[list[dict[str, Any]], bool]:
    gw = getattr(request.app.state, "gateway", None)
    if gw is not None:
        client, keys = gw.aredis, gw.keys
    else:  # mounted without the gateway (tests, embedding)
        settings = Settings()
        client, keys = aioredis.Redis.from_url(redis_url(settings)), Keys(settings.key_prefix)
    raw = await client.hget(keys.catalog, field)
    if not raw:
        return [], False
    return list(json.loads(raw)), True


@router.get("/v1/tools", response_model=ToolCatalog)
async def list_tools(request: Request) -> Any:
    """The tools the workers published (name, description, JSON Schema of the arguments)."""
    tools, published = await _catalog(request, "tools")
    return {"tools": tools + await _offered_elsewhere(request, {t["name"] for t in tools}), "published": published}


async def _offered_elsewhere(request: Request, known: set[str]) -> list[dict[str, Any]]:
    """The tools live workers offer beyond the published catalog (the last worker to start
    wrote it; workers may load different tools: ``reactq.shared.stores.toolsets``)."""
    gw = getattr(request.app.state, "gateway", None)
    if gw is None:
        return []
    sets, _ = parse_toolsets(await gw.aredis.hgetall(gw.keys.toolsets), time.time())
    names = sorted({n for ts in sets for n in ts.tools} - known)
    if not names:
        return []
    raw = await gw.aredis.hmget(gw.keys.tools_offered, names)
    return [json.loads(v) for v in raw if v]


@router.get("/v1/models", response_model=ModelCatalog)
async def list_models(request: Request, use: bool = Query(False, description="add each model's current use")) -> Any:
    """The model registry the workers published (no secrets), with ``?use=true`` each
    model's current use under flow control."""
    models, published = await _catalog(request, "models")
    out = [_public_model(m) for m in models]
    if use and out:
        from reactq.dispatcher.http.flow import usage_by_name

        figures = await usage_by_name(request, [m["name"] for m in out])
        out = [{**m, "use": figures.get(m["name"])} for m in out]
    return {"models": out, "published": published}


def _public_model(m: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in m.items() if "key" not in k.lower() or k == "api_key_env"}
    if isinstance(out.get("base_url"), str):
        out["base_url"] = _strip_credentials(out["base_url"])
    return out


def _strip_credentials(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
