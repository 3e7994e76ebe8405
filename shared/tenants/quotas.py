"""Tenants' quotas, from ``REACTQ_TENANTS`` (a TOML file)::

    [tenants.acme]
    max_active_runs = 50        # more at once → 429 with Retry-After
    rpm = 600                   # LLM requests / tokens a minute across the tenant's runs
    tpm = 2000000
    cost_per_day_usd = 25.0     # dollars a UTC day; reached → runs take the summary path

Every key is optional; a tenant not in the file has no quota. A problem in the file is a
``ConfigError`` naming the file, the ``[tenants.NAME]`` table and the field.
"""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reactq.shared.errors import ConfigError
from reactq.shared.settings import Settings
from reactq.shared.tenants.tenancy import check_tenant

__all__ = ["TenantQuota", "load_tenants", "quota_of"]


class TenantQuota(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_active_runs: int | None = Field(None, ge=1)
    rpm: int | None = Field(None, gt=0)
    tpm: int | None = Field(None, gt=0)
    cost_per_day_usd: float | None = Field(None, gt=0)


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenants: dict[str, TenantQuota] = Field(default_factory=dict)


@functools.lru_cache(maxsize=8)
def _load(path: str) -> dict[str, TenantQuota]:
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    try:
        parsed = _File.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{path}: [{where}] {first['msg']}") from None
    for name in parsed.tenants:
        try:
            check_tenant(name)
        except ValueError as exc:
            raise ConfigError(f"{path}: [tenants.{name}] {exc}") from None
    return dict(parsed.tenants)


def load_tenants(settings: Settings) -> dict[str, TenantQuota]:
    """Every configured tenant's quota (empty without ``REACTQ_TENANTS``)."""
    return {} if settings.tenants is None else _load(str(settings.tenants))


def quota_of(settings: Settings, tenant: str) -> TenantQuota:
    """``tenant``'s quota (no limits when it is not configured)."""
    return load_tenants(settings).get(tenant) or TenantQuota()
