"""API keys in Redis: a key's secret is shown once and only its SHA-256 is stored.

A key is ``rq_`` + 43 URL-safe characters (256 random bits), so a SHA-256 of it is as good
as a slow hash: nobody can guess a preimage. Its record ``apikey:{sha256}`` (hash: key_id,
tenant, scopes, name, created_at) is what a request is checked against; ``apikeys`` (key id
→ the public JSON) lists them; ``last_used_at`` is written at most once a minute per key and
process. Revoking deletes both; a gateway caches a lookup for at most ``CACHE_S`` seconds,
so a revoked key is refused within that time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio as aioredis

from reactq.shared.keys import Keys
from reactq.shared.tenants.tenancy import ADMIN, DEFAULT_TENANT, check_tenant, parse_scopes

__all__ = ["CACHE_S", "ApiKeyStore", "Caller", "KeyChecker", "OPEN_CALLER", "digest_of", "new_secret"]

PREFIX = "rq_"
#: Seconds a gateway trusts a lookup it made (a revoke is effective within this).
CACHE_S = 0.5
#: ``last_used_at`` is written at most this often per key and process.
TOUCH_S = 60.0


@dataclass(frozen=True)
class Caller:
    """Who is calling: a tenant and what the key may do."""

    tenant: str
    scopes: frozenset[str]
    key_id: str | None = None

    @property
    def admin(self) -> bool:
        return ADMIN in self.scopes

    def may(self, scope: str) -> bool:
        return self.admin or scope in self.scopes

    def sees(self, tenant: str) -> bool:
        """An admin sees every tenant's objects; others their own."""
        return self.admin or tenant == self.tenant


#: Without ``REACTQ_API_TOKEN`` every caller is the admin of tenant ``default``.
OPEN_CALLER = Caller(DEFAULT_TENANT, frozenset({ADMIN}))


def new_secret() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def digest_of(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _public(fields: dict[str, Any]) -> dict[str, Any]:
    return {"key_id": fields["key_id"], "tenant": fields["tenant"], "scopes": list(fields["scopes"]),
            "name": fields.get("name"), "created_at": fields["created_at"],
            "last_used_at": fields.get("last_used_at")}


class ApiKeyStore:
    """Create, list and revoke keys (CLI, ``/v1/keys``); synchronous."""

    def __init__(self, client: redis.Redis, keys: Keys | None = None) -> None:
        self.r = client
        self.keys = keys or Keys()

    def create(self, tenant: str, scopes: str | list[str], name: str | None = None) -> dict[str, Any]:
        """A new key: ``{key_id, key, tenant, scopes, name, created_at}`` — the only time
        ``key`` (the secret) is seen. ``ValueError`` naming a bad tenant or scope."""
        check_tenant(tenant)
        scope_list = parse_scopes(scopes)
        if name is not None and len(name) > 200:
            raise ValueError("name: at most 200 characters")
        secret = new_secret()
        digest = digest_of(secret)
        key_id = "key_" + secrets.token_hex(8)
        record: dict[str, Any] = {"key_id": key_id, "tenant": tenant, "scopes": scope_list, "name": name,
                                  "created_at": round(time.time(), 3), "digest": digest}
        pipe = self.r.pipeline(transaction=False)
        pipe.hset(self.keys.api_key(digest), mapping={
            "key_id": key_id, "tenant": tenant, "scopes": ",".join(scope_list), "name": name or "",
            "digest": digest})
        pipe.hset(self.keys.api_keys, key_id, json.dumps(record))
        pipe.execute()
        return {**{k: v for k, v in record.items() if k != "digest"}, "key": secret}

    def list(self) -> list[dict[str, Any]]:
        """Every key's public record (no secret, no digest), oldest first."""
        out = []
        for raw in self.r.hvals(self.keys.api_keys):
            rec = json.loads(raw)
            out.append(_public(rec))
        return sorted(out, key=lambda k: (k["created_at"], k["key_id"]))

    def revoke(self, key_id: str) -> bool:
        """Delete the key; False when there is no such key."""
        raw = self.r.hget(self.keys.api_keys, key_id)
        if raw is None:
            return False
        rec = json.loads(raw)
        pipe = self.r.pipeline(transaction=False)
        pipe.delete(self.keys.api_key(rec["digest"]))
        pipe.hdel(self.keys.api_keys, key_id)
        pipe.execute()
        return True


@dataclass
class KeyChecker:
    """The gateway's side: a bearer secret → its ``Caller`` (None: no such key), cached for
    ``CACHE_S`` seconds, ``last_used_at`` refreshed at most every ``TOUCH_S``."""

    r: aioredis.Redis
    keys: Keys
    cache_s: float = CACHE_S
    _cache: dict[str, tuple[float, Caller | None]] = field(default_factory=dict)
    _touched: dict[str, float] = field(default_factory=dict)

    async def check(self, secret: str) -> Caller | None:
        if not secret.startswith(PREFIX) or len(secret) > 200:
            return None
        digest = digest_of(secret)
        now = time.monotonic()
        hit = self._cache.get(digest)
        if hit is not None and now - hit[0] < self.cache_s:
            return hit[1]
        raw = await self.r.hmget(self.keys.api_key(digest), ["digest", "tenant", "scopes", "key_id"])
        caller = _caller(digest, raw)
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[digest] = (now, caller)
        if caller is not None and caller.key_id is not None:
            await self._touch(caller.key_id, now)
        return caller

    async def _touch(self, key_id: str, now: float) -> None:
        if now - self._touched.get(key_id, -TOUCH_S) < TOUCH_S:
            return
        self._touched[key_id] = now
        raw = await self.r.hget(self.keys.api_keys, key_id)
        if raw is not None:
            rec = json.loads(raw)
            rec["last_used_at"] = round(time.time(), 3)
            # Only if still there: a revoke in between must not be undone.
            await self.r.eval(_SET_IF_PRESENT, 1, self.keys.api_keys, key_id, json.dumps(rec))


_SET_IF_PRESENT = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return 1
"""


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _caller(digest: str, raw: list[Any]) -> Caller | None:
    stored, tenant, scopes, key_id = raw
    # The record was found by its digest; comparing again in constant time costs nothing
    # and keeps the check independent of how the lookup matched.
    if stored is None or not hmac.compare_digest(_text(stored), digest):
        return None
    return Caller(_text(tenant), frozenset(_text(scopes).split(",")), _text(key_id))
