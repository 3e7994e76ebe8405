"""Who is calling, and may they: API keys, scopes and tenants at the gateway.

``KeyAuth`` (ASGI, installed when ``REACTQ_API_TOKEN`` is set) turns ``Authorization: Bearer
<secret>`` into a ``Caller`` in the request's state: the token is an ``admin`` key of tenant
``default``; an ``rq_`` key is looked up (``reactq.shared.stores.keys``). No or a bad key →
401. Without the token the gateway is open and every caller is the admin of ``default``.

Routes say what they need with one dependency (a missing scope → 403 naming it; another
tenant's id → 404, exactly as an id that does not exist)::

    def get_run(run_id: RunRead, gw: GatewayDep): ...           # runs:read + the run's tenant
    def cancel_dag(dag_id: DagWrite, gw: GatewayDep): ...       # dags:write + the DAG's tenant
    def create_batch(caller: Annotated[Caller, need("batches:write")], ...): ...

and a route of another kind checks its record in one line::

    caller = await owned(request, gw, Record("webhook", wid, gw.keys.webhook(wid)), "runs:read")

Ids a client chooses (threads, schedules) are per tenant: a route finds the caller's
tenant's object of that id (an admin names another tenant with ``?tenant=``).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Query, Request

from reactq.dispatcher.http.errors import Forbidden
from reactq.dispatcher.http.gateway import Gateway, GatewayDep, IdPath
from reactq.dispatcher.http.middleware import OPEN_PATHS, ASGIApp, Receive, Scope, Send, send_json
from reactq.shared.api.errors import error_body
from reactq.shared.errors import RunNotFound
from reactq.shared.stores.keys import OPEN_CALLER, Caller, KeyChecker
from reactq.shared.stores.records import Record, batch_record, dag_record, run_record
from reactq.shared.tenants.tenancy import ADMIN, DEFAULT_TENANT, owned_name

__all__ = ["ApprovalWrite", "BatchRead", "BatchWrite", "Caller", "CallerDep", "DagRead", "DagWrite", "KeyAuth",
           "RunRead", "RunWrite", "ScheduleRead", "ScheduleRef", "ScheduleWrite", "caller_of", "need", "owned"]

_TOKEN_CALLER = Caller(DEFAULT_TENANT, frozenset({ADMIN}), key_id="REACTQ_API_TOKEN")
UNAUTHORIZED = "missing, unknown or revoked API key (Authorization: Bearer <key>)"


class KeyAuth:
    """Every route but the probes, the viewer's static files and the API's description needs
    a key (the description and its interactive docs hold no data: ``/docs`` takes a key in
    its *Authorize* dialog and sends it with every request it tries)."""

    OPEN = (*OPEN_PATHS, "/ui", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json")
    # The viewer's static files hold no data: the page must load to show its key prompt.
    OPEN_PREFIXES = ("/ui/",)

    def __init__(self, app: ASGIApp, token: Any, gateway: Gateway) -> None:
        self.app = app
        # Settings hold the token as a pydantic SecretStr (kept out of reprs and logs).
        raw = token.get_secret_value() if hasattr(token, "get_secret_value") else str(token)
        self.token = raw.encode()
        self.gateway = gateway
        self._checker: KeyChecker | None = None

    @property
    def checker(self) -> KeyChecker:
        if self._checker is None or self._checker.r is not self.gateway.aredis:
            self._checker = KeyChecker(self.gateway.aredis, self.gateway.keys)
        return self._checker

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"] if scope["type"] == "http" else ""
        if scope["type"] != "http" or path in self.OPEN or path.startswith(self.OPEN_PREFIXES):
            await self.app(scope, receive, send)
            return
        caller = await self._caller(dict(scope.get("headers") or []).get(b"authorization", b""))
        if caller is None:
            await send_json(send, 401, error_body(401, UNAUTHORIZED), [(b"www-authenticate", b"Bearer")])
            return
        scope.setdefault("state", {})["caller"] = caller
        await self.app(scope, receive, send)

    async def _caller(self, auth: bytes) -> Caller | None:
        scheme, _, given = auth.partition(b" ")
        given = given.strip()
        if scheme.lower() != b"bearer" or not given:
            return None
        # compare_digest: the time taken must not reveal how much of the token matched.
        if hmac.compare_digest(given, self.token):
            return _TOKEN_CALLER
        try:
            secret = given.decode("ascii")
        except UnicodeDecodeError:
            return None
        return await self.checker.check(secret)


def caller_of(request: Request) -> Caller:
    """The request's caller (the open gateway's: the admin of ``default``)."""
    state = request.scope.get("state") or {}
    caller = state.get("caller")
    return caller if isinstance(caller, Caller) else OPEN_CALLER


async def get_caller(request: Request) -> Caller:
    return caller_of(request)


CallerDep = Annotated[Caller, Depends(get_caller)]


def need(scope: str) -> Any:
    """A dependency: the caller, if its key has ``scope`` (else 403 naming it)."""
    async def dep(request: Request) -> Caller:
        caller = caller_of(request)
        if not caller.may(scope):
            raise Forbidden(scope)
        return caller
    return Depends(dep)


async def owned(request: Request, gw: Gateway, record: Record, scope: str) -> Caller:
    """The caller, if it has ``scope`` and may see ``record`` (its tenant's); 403 / 404
    otherwise: another tenant's record is exactly as absent as one that never existed."""
    caller = caller_of(request)
    if not caller.may(scope):
        raise Forbidden(scope)
    owner = await record.owner(gw.aredis)
    if owner is None or not caller.sees(owner):
        raise RunNotFound(f"no {record.what} with id {record.ident!r} (it may have expired)")
    return caller


def _run(scope: str) -> Any:
    async def dep(run_id: IdPath, request: Request, gw: GatewayDep) -> str:
        await owned(request, gw, run_record(gw.keys, run_id), scope)
        return run_id
    return Depends(dep)


def _dag(scope: str) -> Any:
    async def dep(dag_id: IdPath, request: Request, gw: GatewayDep) -> str:
        await owned(request, gw, dag_record(gw.keys, dag_id), scope)
        return dag_id
    return Depends(dep)


def _batch(scope: str) -> Any:
    async def dep(batch_id: IdPath, request: Request, gw: GatewayDep) -> str:
        await owned(request, gw, batch_record(gw.keys, batch_id), scope)
        return batch_id
    return Depends(dep)


@dataclass(frozen=True)
class ScheduleRef:
    """A schedule of the route: its id and its tenant (schedule ids are per tenant)."""

    schedule_id: str
    tenant: str


def _schedule(scope: str) -> Any:
    """The caller's tenant's schedule of that id; an admin names another tenant's with
    ``?tenant=`` (as for a thread)."""
    async def dep(schedule_id: IdPath, request: Request, gw: GatewayDep,
                  tenant: str | None = Query(None, max_length=63, description=(
                      "an admin key: whose schedule (default: its own tenant's)"))) -> ScheduleRef:
        caller = caller_of(request)
        owner = tenant if tenant is not None and caller.admin else caller.tenant
        record = Record("schedule", schedule_id, gw.keys.schedule(owned_name(owner, schedule_id)), present="spec")
        try:
            await owned(request, gw, record, scope)
        except RunNotFound:
            if owner == DEFAULT_TENANT:
                raise
            # Stored under its bare id: its tenant field decides (a second read only on a miss).
            bare = Record("schedule", schedule_id, gw.keys.schedule(schedule_id), present="spec")
            await owned(request, gw, bare, scope)
        return ScheduleRef(schedule_id, owner)
    return Depends(dep)


RunRead = Annotated[str, _run("runs:read")]
ApprovalWrite = Annotated[str, _run("approvals:write")]
RunWrite = Annotated[str, _run("runs:write")]
DagRead = Annotated[str, _dag("runs:read")]
DagWrite = Annotated[str, _dag("dags:write")]
BatchRead = Annotated[str, _batch("runs:read")]
BatchWrite = Annotated[str, _batch("batches:write")]
ScheduleRead = Annotated[ScheduleRef, _schedule("runs:read")]
ScheduleWrite = Annotated[ScheduleRef, _schedule("schedules:write")]
