"""API key routes (scope ``admin``): create, list, revoke.

* ``POST /v1/keys {tenant, scopes: [...], name}`` → 201 ``{key_id, key, tenant, scopes, name,
  created_at}``; ``key`` (``rq_`` + 43 URL-safe characters) is shown here only.
* ``GET /v1/keys`` → ``{keys: [{key_id, tenant, scopes, name, created_at, last_used_at}]}``.
* ``DELETE /v1/keys/{key_id}`` → 200 ``{key_id, revoked: true}``; 404 for an unknown key.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Path

from reactq.dispatcher.http.auth import need
from reactq.dispatcher.http.errors import field_error, not_found, responses
from reactq.dispatcher.http.gateway import GatewayDep
from reactq.shared.api.keys import KEY_ID_PATTERN, KeyCreated, KeyIn, KeyList, KeyRevoked
from reactq.shared.stores.keys import ApiKeyStore

__all__ = ["router"]

router = APIRouter(tags=["keys"], dependencies=[need("admin")])


def _store(gw: Any) -> ApiKeyStore:
    return ApiKeyStore(gw.dispatcher.redis, gw.keys)


@router.post("/v1/keys", status_code=201, response_model=KeyCreated)
async def create_key(body: KeyIn, gw: GatewayDep) -> Any:
    """A new key for ``tenant`` with ``scopes``; its secret is in this answer only."""
    try:
        return await asyncio.to_thread(_store(gw).create, body.tenant, body.scopes, body.name)
    except ValueError as exc:
        field = str(exc).split(":", 1)[0].split(" ", 1)[0]
        return field_error(field if field in ("tenant", "scopes", "name") else None, str(exc))


@router.get("/v1/keys", response_model=KeyList)
async def list_keys(gw: GatewayDep) -> Any:
    """Every key, without its secret."""
    return {"keys": await asyncio.to_thread(_store(gw).list)}


@router.delete("/v1/keys/{key_id}", response_model=KeyRevoked, responses=responses(404))
async def revoke_key(gw: GatewayDep, key_id: str = Path(..., pattern=KEY_ID_PATTERN)) -> Any:
    """Revoke: the key is refused (401) within a second everywhere."""
    if not await asyncio.to_thread(_store(gw).revoke, key_id):
        return not_found(f"no API key with id {key_id!r}")
    return {"key_id": key_id, "revoked": True}
