"""Tenants: who owns a run, DAG, batch or thread, and what a key may do (pure).

Every record carries ``tenant`` (the tenant of the key that made it). Run, DAG and batch
keys keep their names — the tenant is a field, checked on every access — while thread ids,
schedule ids and idempotency keys are names a client chooses, so they are scoped by tenant
here: two tenants' ``thread_id``s, ``schedule_id``s and idempotency keys never meet. Tenant ``default`` keeps the names
it always had, so data written before tenants existed stays valid.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

__all__ = ["ADMIN", "DEFAULT_TENANT", "SCOPES", "Scope", "TENANT_PATTERN", "check_tenant",
           "idem_scope", "owned_name", "owner_of", "parse_scopes", "split_owned", "thread_key"]

DEFAULT_TENANT = "default"
TENANT_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
_TENANT_RE = re.compile(TENANT_PATTERN)

Scope = Literal["runs:read", "runs:write", "approvals:write", "batches:write", "dags:write",
                "schedules:write", "admin"]
SCOPES: tuple[str, ...] = get_args(Scope)
ADMIN = "admin"


def check_tenant(name: str) -> str:
    """``name`` when it is a valid tenant name, else ``ValueError`` saying what is allowed."""
    if not _TENANT_RE.match(name):
        raise ValueError(f"tenant {name[:80]!r}: 1..63 characters of a-z 0-9 _ -, starting "
                         "with a letter or digit")
    return name


def parse_scopes(raw: str | list[str]) -> list[str]:
    """Scopes from ``"runs:read,runs:write"`` or a list; ``ValueError`` naming an unknown one."""
    items = [s.strip() for s in (raw.split(",") if isinstance(raw, str) else raw) if s.strip()]
    if not items:
        raise ValueError(f"scopes: at least one of {', '.join(SCOPES)}")
    for s in items:
        if s not in SCOPES:
            raise ValueError(f"scopes: unknown scope {s[:80]!r} (known: {', '.join(SCOPES)})")
    return list(dict.fromkeys(items))


def owned_name(tenant: str, ident: str) -> str:
    """The name the Redis keys of ``tenant``'s object ``ident`` (a thread or schedule id the
    client chose) are built from: ``ident`` itself for ``default``, else ``tenant/ident``.
    Those ids never contain ``/`` (``THREAD_ID_PATTERN``, ``ID_PATTERN``), so ``tenant/``
    cannot be forged by another tenant's id."""
    return ident if tenant == DEFAULT_TENANT else f"{tenant}/{ident}"


def split_owned(name: str) -> tuple[str, str]:
    """``(tenant, ident)`` of a name made by ``owned_name``."""
    tenant, sep, ident = name.partition("/")
    return (tenant, ident) if sep else (DEFAULT_TENANT, name)


def thread_key(tenant: str, thread_id: str) -> str:
    """The name a thread's Redis keys are built from (``owned_name``)."""
    return owned_name(tenant, thread_id)


def idem_scope(tenant: str) -> str:
    """The part an idempotency key's Redis name and derived id add for ``tenant`` (empty
    for ``default``, so its keys keep their names)."""
    return "" if tenant == DEFAULT_TENANT else f"@{tenant}"


def owner_of(raw: bytes | str | None) -> str:
    """The ``tenant`` field of a stored record (records older than tenants: ``default``)."""
    if raw is None:
        return DEFAULT_TENANT
    return raw.decode() if isinstance(raw, bytes) else raw
