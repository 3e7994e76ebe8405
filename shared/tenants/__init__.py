"""Tenants: who owns what (``tenancy``: the default tenant, tenant-scoped names) and what each
tenant may use (``quotas``: ``max_active_runs``, the daily dollar cap)."""
