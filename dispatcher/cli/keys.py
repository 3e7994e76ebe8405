"""``reactq keys create|list|revoke``: API keys, straight in Redis (``REACTQ_REDIS_URL``).

``create`` prints the secret once (it is stored hashed: lost, it cannot be shown again);
``--json`` prints ``{key_id, key, tenant, scopes, name, created_at}`` (the same object as
``POST /v1/keys``), ``list --json`` the list without secrets. Bad tenant or scope: exit 2.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer

from reactq.dispatcher.cli.common import dispatcher, err, fail, out

if TYPE_CHECKING:
    from reactq.shared.stores.keys import ApiKeyStore

app = typer.Typer(name="keys", help="API keys: a tenant and scopes each (stored hashed).",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_show_locals=False)


def _store() -> ApiKeyStore:
    from reactq.shared.stores.keys import ApiKeyStore

    d = dispatcher()
    return ApiKeyStore(d.redis, d.keys)


@app.command()
def create(
    tenant: str = typer.Option(..., "--tenant", help="the tenant the key acts for"),
    scopes: str = typer.Option(..., "--scopes", help="comma-separated: runs:read, runs:write, "
                               "approvals:write, batches:write, dags:write, schedules:write, admin"),
    name: str | None = typer.Option(None, "--name", help="a label for the list"),
    as_json: bool = typer.Option(False, "--json", help="print the key as one JSON object"),
) -> None:
    """Create a key; its secret is printed now and never again."""
    try:
        key = _store().create(tenant, scopes, name)
    except ValueError as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps(key), flush=True)
        return
    out.print(key["key"])
    err.print(f"[dim]{key['key_id']}: tenant {key['tenant']}, scopes {','.join(key['scopes'])}; "
              "the secret above is shown only once[/]")


@app.command("list")
def list_keys(as_json: bool = typer.Option(False, "--json", help="print the list as JSON")) -> None:
    """Every key (never its secret)."""
    keys = _store().list()
    if as_json:
        print(json.dumps({"keys": keys}), flush=True)
        return
    for k in keys:
        used = k["last_used_at"] if k["last_used_at"] is not None else "never"
        out.print(f"{k['key_id']}  {k['tenant']}  {','.join(k['scopes'])}  {k['name'] or ''}  "
                  f"last used: {used}")


@app.command()
def revoke(key_id: str = typer.Argument(..., help="the key id (key_…)"),
           as_json: bool = typer.Option(False, "--json", help="print the outcome as JSON")) -> None:
    """Revoke a key: refused everywhere within a second."""
    if not _store().revoke(key_id):
        fail(f"no API key with id {key_id!r}")  # an id that names nothing: 2
    if as_json:
        print(json.dumps({"key_id": key_id, "revoked": True}), flush=True)
    else:
        err.print(f"revoked {key_id}")
