"""Tenants through the real gateway (a uvicorn process with ``REACTQ_API_TOKEN``) and the
session's workers: every route × {own tenant, other tenant, no key, wrong scope, revoked
key}; lists, threads and idempotency keys per tenant; no secret in Redis or the logs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
import redis

from tests.integration.conftest import worker_env
from tests.integration.test_gateway import Gateway, start_gateway, stop_gateway
from tests.scripted_server import reply_text
from tests.metrics_kit import settled

pytestmark = pytest.mark.integration
TOKEN = "tenants-admin-token-3f9c2e"
WRITE_SCOPES = ["runs:read", "runs:write", "batches:write", "dags:write", "schedules:write"]


@pytest.fixture(scope="module")
def gateway(redis_url: str, llm: Any, workers: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("tenants")
    (tmp / "tenants.toml").write_text("[tenants.busy]\nmax_active_runs = 1\n")
    env = worker_env(redis_url, llm, REACTQ_API_TOKEN=TOKEN, REACTQ_SSE_KEEPALIVE="0.4",
                     REACTQ_TENANTS=str(tmp / "tenants.toml"))
    gw = start_gateway(env, tmp / "gateway.log")
    yield gw
    stop_gateway(gw)


def client(gw: Gateway, secret: str | None) -> httpx2.Client:
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    return httpx2.Client(base_url=gw.url, headers=headers, timeout=30)


@dataclass
class World:
    admin: httpx2.Client
    keys: dict[str, dict[str, Any]]
    ids: dict[str, str]

    def as_(self, who: str, gw: Gateway) -> httpx2.Client:
        return client(gw, self.keys[who]["key"]) if who in self.keys else client(gw, None)


def _key(admin: httpx2.Client, tenant: str, scopes: list[str], name: str) -> dict[str, Any]:
    res = admin.post("/v1/keys", json={"tenant": tenant, "scopes": scopes, "name": name})
    assert res.status_code == 201, res.text
    body = res.json()
    assert body["key"].startswith("rq_") and len(body["key"]) >= 35
    return dict(body)


def _wait_ended(c: httpx2.Client, run_id: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if c.get(f"/v1/runs/{run_id}").json()["status"] in ("succeeded", "failed", "cancelled"):
            return
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not end")


@pytest.fixture(scope="module")
def world(gateway: Gateway, llm: Any) -> Iterator[World]:
    admin = client(gateway, TOKEN)
    keys = {"own": _key(admin, "acme", WRITE_SCOPES, "acme app"),
            "other": _key(admin, "beta", WRITE_SCOPES, "beta app"),
            "wrong_scope": _key(admin, "acme", ["approvals:write"], "acme approver"),
            "revoked": _key(admin, "acme", WRITE_SCOPES, "acme old")}
    assert admin.delete(f"/v1/keys/{keys['revoked']['key_id']}").status_code == 200
    own = client(gateway, keys["own"]["key"])
    q = llm.script(llm.unique("tenants: what is 2+2?"), [reply_text("4")], synthesis=reply_text("It is 4."))
    run_id = own.post("/v1/runs", json={"query": q, "thread_id": "t1"}).json()["run_id"]
    _wait_ended(own, run_id)
    live_q = llm.script(llm.unique("tenants: a long one"), [reply_text("x", delay=10)])
    live = own.post("/v1/runs", json={"query": live_q}).json()["run_id"]
    dag = own.post("/v1/dags", json={"goal": "g", "steps": [{"id": "a", "task": live_q}]}).json()["dag_id"]
    batch = own.post("/v1/batches", json={"requests": [{"query": q}]}).json()["batch_id"]
    sid = f"acme-nightly-{uuid.uuid4().hex[:6]}"
    made = own.post("/v1/schedules", json={
        "schedule_id": sid, "cron": "30 2 * * *", "paused": True, "run": {"query": q}})
    assert made.status_code == 201, made.text
    yield World(admin, keys, {"run": run_id, "live": live, "dag": dag, "batch": batch, "thread": "t1",
                              "schedule": sid})
    own.post(f"/v1/runs/{live}/cancel")
    own.post(f"/v1/dags/{dag}/cancel")


# (method, path, body, scope): every route that takes an id of the tenant's objects.
ID_ROUTES: list[tuple[str, str, dict[str, Any] | None, str]] = [
    ("GET", "/v1/runs/{run}", None, "runs:read"),
    ("GET", "/v1/runs/{run}/events", None, "runs:read"),
    ("GET", "/v1/runs/{run}/summary", None, "runs:read"),
    ("GET", "/v1/dags/{dag}", None, "runs:read"),
    ("GET", "/v1/dags/{dag}/events?after=999999999999-0", None, "runs:read"),
    ("GET", "/v1/batches/{batch}", None, "runs:read"),
    ("GET", "/v1/threads/{thread}", None, "runs:read"),
    ("POST", "/v1/runs/{live}/interrupts", {"content": "and?"}, "runs:write"),
    ("POST", "/v1/dags/{dag}/interrupts", {"content": "and?"}, "dags:write"),
    ("POST", "/v1/batches/{batch}/cancel", None, "batches:write"),
    ("POST", "/v1/runs/{live}/cancel", None, "runs:write"),
    ("POST", "/v1/dags/{dag}/cancel", None, "dags:write"),
    ("GET", "/v1/runs/{run}/webhooks", None, "runs:read"),
    ("GET", "/v1/dags/{dag}/webhooks", None, "runs:read"),
    ("GET", "/v1/batches/{batch}/webhooks", None, "runs:read"),
    ("GET", "/v1/schedules/{schedule}", None, "runs:read"),
    ("PATCH", "/v1/schedules/{schedule}", {"paused": True}, "schedules:write"),
]
# Routes without an id: what each key may do.
DOOR_ROUTES: list[tuple[str, str, dict[str, Any] | None, str]] = [
    ("GET", "/v1/runs", None, "runs:read"),
    ("GET", "/v1/dags", None, "runs:read"),
    ("GET", "/v1/batches", None, "runs:read"),
    ("GET", "/v1/schedules", None, "runs:read"),
    ("GET", "/v1/ui/dashboard", None, "runs:read"),
    ("POST", "/v1/runs", {"query": "q", "tools": ["no-such-tool"]}, "runs:write"),
    ("POST", "/v1/dags", {"goal": "g", "tools": ["no-such-tool"]}, "dags:write"),
    ("POST", "/v1/batches", {"requests": [{"query": "q", "tools": ["no-such-tool"]}]}, "batches:write"),
    ("GET", "/v1/keys", None, "admin"),
    ("POST", "/v1/keys", {"tenant": "x", "scopes": ["runs:read"]}, "admin"),
    ("GET", "/metrics", None, "admin"),
]


def _call(c: httpx2.Client, method: str, path: str, body: dict[str, Any] | None, ids: dict[str, str]) -> httpx2.Response:
    url = path.format(**ids)
    if url.endswith("/events") or "/events?" in url:
        with c.stream(method, url) as res:
            res.read() if res.status_code != 200 else None
            return res
    return c.request(method, url, json=body)


@pytest.mark.parametrize("route", ID_ROUTES, ids=lambda r: f"{r[0]} {r[1]}")
def test_every_id_route_by_caller(gateway: Gateway, world: World, route: Any) -> None:
    method, path, body, scope = route
    by = {who: _call(world.as_(who, gateway), method, path, body, world.ids)
          for who in ("other", "nobody", "wrong_scope", "revoked")}
    # Another tenant's id is exactly as absent as one that never existed.
    assert by["other"].status_code == 404, by["other"].text
    assert by["nobody"].status_code == 401
    assert by["revoked"].status_code == 401
    assert by["wrong_scope"].status_code == 403 and scope in by["wrong_scope"].text
    own = _call(world.as_("own", gateway), method, path, body, world.ids)
    assert own.status_code in (200, 202, 409), (own.status_code, own.text)
    # An admin reaches every tenant's objects (a thread or a schedule by its tenant's name for it).
    admin_path = path + "?tenant=acme" if path.startswith(("/v1/threads", "/v1/schedules")) else path
    assert _call(world.admin, method, admin_path, body, world.ids).status_code in (200, 202, 409)


@pytest.mark.parametrize("route", DOOR_ROUTES, ids=lambda r: f"{r[0]} {r[1]}")
def test_every_door_route_by_caller(gateway: Gateway, world: World, route: Any) -> None:
    method, path, body, scope = route
    for who in ("nobody", "revoked"):
        assert _call(world.as_(who, gateway), method, path, body, world.ids).status_code == 401
    wrong = _call(world.as_("wrong_scope", gateway), method, path, body, world.ids)
    assert wrong.status_code == 403 and scope in wrong.text
    own = _call(world.as_("own", gateway), method, path, body, world.ids)
    if scope == "admin":
        assert own.status_code == 403 and "admin" in own.text
    else:  # allowed: the request itself is answered (a 422 names the unknown tool)
        assert own.status_code in (200, 202, 422), own.text


def test_lists_are_filtered_and_an_admin_sees_every_tenant(gateway: Gateway, world: World) -> None:
    def listed(c: httpx2.Client) -> set[str]:
        return {r["run_id"] for r in c.get("/v1/runs", params={"limit": 500}).json()["runs"]}

    assert world.ids["run"] in listed(world.as_("own", gateway))
    assert world.ids["run"] not in listed(world.as_("other", gateway))
    assert world.ids["run"] in listed(world.admin)
    rows = world.as_("own", gateway).get("/v1/runs", params={"limit": 500}).json()["runs"]
    assert {r["tenant"] for r in rows} == {"acme"}


def test_the_dashboard_counts_the_callers_tenant_and_gives_cluster_figures_to_admins(
        gateway: Gateway, world: World) -> None:
    settled(lambda: world.admin.get("/v1/ui/dashboard").json(), lambda d: (d["turn_seconds"] or {}).get("count"))
    own = world.as_("own", gateway).get("/v1/ui/dashboard").json()
    other = world.as_("other", gateway).get("/v1/ui/dashboard").json()
    admin = world.admin.get("/v1/ui/dashboard").json()
    assert own["by_status"].get("succeeded", 0) >= 1 and own["tokens"]["total"] > 0
    assert admin["runs"] >= own["runs"] + other["runs"]
    for d in (own, other):  # queues, runs in flight and turn times are every tenant's: admins only
        assert d["queue_depth"] is None and d["in_flight"] is None and d["turn_seconds"] is None
    assert admin["queue_depth"] is not None and admin["turn_seconds"]["count"] >= 1


def test_thread_ids_and_idempotency_keys_are_per_tenant(gateway: Gateway, world: World, llm: Any) -> None:
    own, other = world.as_("own", gateway), world.as_("other", gateway)
    q = llm.script(llm.unique("tenants: same key"), [reply_text("ok")])
    a = own.post("/v1/runs", json={"query": q, "idempotency_key": "k-1"}).json()
    b = other.post("/v1/runs", json={"query": q, "idempotency_key": "k-1"}).json()
    assert a["created"] and b["created"] and a["run_id"] != b["run_id"]
    assert own.post("/v1/runs", json={"query": q, "idempotency_key": "k-1"}).json()["run_id"] == a["run_id"]
    # The other tenant's thread "t1" is its own: empty until it uses it.
    assert other.get("/v1/threads/t1").status_code == 404
    mine = other.post("/v1/runs", json={"query": q, "thread_id": "t1"}).json()["run_id"]
    _wait_ended(other, mine)
    assert [r["run_id"] for r in other.get("/v1/threads/t1").json()["runs"]] == [mine]
    assert world.ids["run"] in [r["run_id"] for r in own.get("/v1/threads/t1").json()["runs"]]


def test_a_revoked_key_is_refused_within_a_second(gateway: Gateway, world: World) -> None:
    key = _key(world.admin, "acme", ["runs:read"], "short-lived")
    c = client(gateway, key["key"])
    assert c.get("/v1/runs").status_code == 200
    listed = {k["key_id"]: k for k in world.admin.get("/v1/keys").json()["keys"]}
    assert listed[key["key_id"]]["last_used_at"] is not None
    assert "key" not in listed[key["key_id"]]
    assert world.admin.delete(f"/v1/keys/{key['key_id']}").status_code == 200
    time.sleep(1.0)
    assert c.get("/v1/runs").status_code == 401
    assert world.admin.delete(f"/v1/keys/{key['key_id']}").status_code == 404


def test_no_secret_in_redis_or_the_logs(gateway: Gateway, world: World, redis_url: str) -> None:
    secrets = [k["key"] for k in world.keys.values()] + [TOKEN]
    r = redis.Redis.from_url(redis_url)
    blob = bytearray()
    for key in r.scan_iter(count=1000):
        kind = r.type(key)
        blob += key
        if kind == b"string":
            blob += r.get(key) or b""
        elif kind == b"hash":
            for k, v in r.hgetall(key).items():
                blob += k + v
        elif kind == b"list":
            blob += b"".join(r.lrange(key, 0, -1))
        elif kind == b"stream":
            for _, fields in r.xrange(key):
                blob += b"".join(k + v for k, v in fields.items())
    log = gateway.log.read_bytes()
    for secret in secrets:
        assert secret.encode() not in blob
        assert secret.encode() not in log


def test_past_max_active_runs_is_429_with_retry_after(gateway: Gateway, world: World, llm: Any) -> None:
    busy = client(gateway, _key(world.admin, "busy", ["runs:read", "runs:write"], "busy app")["key"])
    slow = llm.script(llm.unique("tenants: busy slow"), [reply_text("done", delay=2.0)])
    first = busy.post("/v1/runs", json={"query": slow})
    assert first.status_code == 202
    refused = busy.post("/v1/runs", json={"query": slow})
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert "max_active_runs" in refused.text
    # Another tenant is not held back by this one's quota.
    assert world.as_("own", gateway).post("/v1/runs", json={"query": slow}).status_code == 202
    _wait_ended(busy, first.json()["run_id"])
    assert busy.post("/v1/runs", json={"query": slow}).status_code == 202


def test_the_python_client_speaks_keys_and_gets_typed_refusals(gateway: Gateway, world: World) -> None:
    import reactq

    with reactq.Client(gateway.url, api_key=TOKEN) as admin:
        made = admin.keys.create(tenant="acme", scopes=["runs:read"], name="from the client")
        assert made.key is not None and made.key.startswith("rq_")
        assert made.key_id in {k.key_id for k in admin.keys.list().keys}
    with reactq.Client(gateway.url, api_key=made.key) as reader:
        assert reader.runs.get(world.ids["run"]).run_id == world.ids["run"]
        with pytest.raises(reactq.ReactqError) as refused:
            reader.runs.cancel(world.ids["run"])
        assert getattr(refused.value, "status_code", None) == 403
    with reactq.Client(gateway.url, api_key=world.keys["other"]["key"]) as other:
        with pytest.raises(reactq.ReactqError) as missing:
            other.runs.get(world.ids["run"])
        assert getattr(missing.value, "status_code", None) == 404
    with reactq.Client(gateway.url, api_key=TOKEN) as admin:
        admin.keys.revoke(made.key_id)
        # An admin names another tenant's thread or schedule (ids a client chooses are per tenant).
        sid = world.ids["schedule"]
        with pytest.raises(reactq.ReactqError) as not_default:
            admin.schedules.get(sid)
        assert getattr(not_default.value, "status_code", None) == 404
        assert admin.schedules.get(sid, tenant="acme").schedule_id == sid
        assert admin.schedules.update(sid, tenant="acme", paused=True).schedule_id == sid
        assert world.ids["run"] in {r.run_id for r in admin.threads.get("t1", tenant="acme").runs}


def test_schedule_ids_are_per_tenant(gateway: Gateway, world: World, llm: Any) -> None:
    """Another tenant may use the same schedule id: a schedule of its own (never a 409 that
    tells it the id is taken), read, listed, triggered and deleted apart from the first."""
    own, other = world.as_("own", gateway), world.as_("other", gateway)
    sid = world.ids["schedule"]
    q = llm.script(llm.unique("tenants: beta's schedule"), [reply_text("b")], synthesis=reply_text("beta"))
    made = other.post("/v1/schedules", json={"schedule_id": sid, "interval_s": 3600, "paused": True,
                                             "run": {"query": q}})
    assert made.status_code == 201, made.text
    assert other.post("/v1/schedules", json={"schedule_id": sid, "interval_s": 60,
                                             "run": {"query": q}}).status_code == 409  # its own id, taken
    assert other.get(f"/v1/schedules/{sid}").json()["run"]["query"] == q
    assert own.get(f"/v1/schedules/{sid}").json()["cron"] == "30 2 * * *"
    listed = {s["schedule_id"]: s for s in other.get("/v1/schedules").json()["schedules"]}
    assert listed[sid]["interval_s"] == 3600
    assert {s["schedule_id"]: s for s in own.get("/v1/schedules").json()["schedules"]}[sid]["cron"] == "30 2 * * *"
    fired = other.post(f"/v1/schedules/{sid}/trigger")
    assert fired.status_code == 202, fired.text
    run_id = fired.json()["run_id"]
    _wait_ended(other, run_id)
    assert own.get(f"/v1/runs/{run_id}").status_code == 404
    assert [r["run_id"] for r in other.get("/v1/runs", params={"schedule_id": sid}).json()["runs"]] == [run_id]
    assert run_id not in {r["run_id"] for r in own.get("/v1/runs", params={"schedule_id": sid}).json()["runs"]}
    assert world.admin.get(f"/v1/schedules/{sid}", params={"tenant": "beta"}).json()["run"]["query"] == q
    assert other.delete(f"/v1/schedules/{sid}").status_code == 204
    assert other.get(f"/v1/schedules/{sid}").status_code == 404
    assert own.get(f"/v1/schedules/{sid}").status_code == 200
