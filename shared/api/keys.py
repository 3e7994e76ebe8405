"""The bodies of the API key routes (scope ``admin``)."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from reactq.shared.api.base import ApiModel

#: A key's id: ``key_`` + 16 hex characters (the secret itself is never an id).
KEY_ID_PATTERN = r"^key_[0-9a-f]{16}$"


class KeyIn(ApiModel):
    """A new API key: its tenant, what it may do, a name to recognise it by."""

    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(..., min_length=1, max_length=63)
    """The tenant whose objects the key makes and sees."""
    scopes: list[str] = Field(..., min_length=1, max_length=7)
    """``runs:read``, ``runs:write``, ``approvals:write``, ``batches:write``, ``dags:write``,
    ``schedules:write`` or ``admin``."""
    name: str | None = Field(None, max_length=200)
    """A label for people (not secret)."""


class KeyRow(ApiModel):
    """A key as listed: never its secret."""

    key_id: str
    """The key's id (what ``DELETE /v1/keys/{key_id}`` takes)."""
    tenant: str
    """Its tenant."""
    scopes: list[str]
    """What it may do."""
    name: str | None = None
    """Its label."""
    created_at: float
    """Unix time it was made."""
    last_used_at: float | None = None
    """Unix time it last opened a request (null: never)."""


class KeyCreated(KeyRow):
    """A new key, with its secret: shown in this answer only."""

    key: str
    """The secret (``rq_`` + URL-safe characters): send it as ``Authorization: Bearer <key>``."""


class KeyList(ApiModel):
    """Every API key, without secrets."""

    keys: list[KeyRow]
    """The keys, oldest first."""


class KeyRevoked(ApiModel):
    """A key revoked: refused (401) within a second everywhere."""

    key_id: str
    """The key's id."""
    revoked: bool = True
    """Always true."""
