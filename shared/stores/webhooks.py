"""The webhook delivery log: one hash per message, an index per run, DAG or batch, and the
message's member in the ``due`` set while it is pending.

* ``webhook:{webhook_id}`` (hash): the message (``type``, ``url``, ``body``: the exact bytes
  every attempt sends), its owner and the owner's ``tenant`` (whose delivery it is), and its
  delivery (``status`` pending | delivered | failed,
  ``attempts``, ``last_status_code``, ``last_error``, ``next_attempt_at``).
* ``run:{id}:webhooks`` (and ``dag:``, ``batch:``): the owner's webhook ids by creation time.
* ``due`` member ``webhook:<webhook_id>``: armed (``ZADD NX``) before or with the terminal
  write that makes the message due, so a crash right after that write leaves it due; scored
  at the next attempt's time while retries wait, removed once the status is final. The
  watchdogs (``workers/recovery/watchdog.py``) send the delivery task for a member past its deadline whose
  lease nobody holds: a delivery whose worker died resumes within seconds.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import redis

from reactq.shared.stores.due import deadline_ms
from reactq.shared.keys import Keys
from reactq.shared.stores.roundtrip import Op
from reactq.shared.stores.streams import text
from reactq.shared.tenants.tenancy import DEFAULT_TENANT, owner_of
from reactq.shared.webhooks import due_member

# KEYS: the delivery hash. ARGV: ttl s, then field/value pairs. Writes the delivery only if
# there is none (the first to notice the message makes it); returns 1 when it wrote.
_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
return 1
"""

PUBLIC_FIELDS = ("webhook_id", "type", "tenant", "status", "attempts", "last_status_code", "next_attempt_at")


@dataclass
class Delivery:
    """One webhook message and how its delivery stands."""

    webhook_id: str
    type: str
    url: str
    owner_kind: str
    owner_id: str
    body: str
    status: str = "pending"
    attempts: int = 0
    last_status_code: int | None = None
    last_error: str | None = None
    next_attempt_at: float | None = None
    created_at: float = 0.0
    tenant: str = DEFAULT_TENANT
    """The tenant of the run, DAG or batch it is about: only that tenant (and admins) read it."""

    def public(self) -> dict[str, Any]:
        """What ``GET …/webhooks`` lists (the URL and body stay in the log)."""
        out = {k: v for k, v in asdict(self).items() if k in PUBLIC_FIELDS}
        out["last_error"] = self.last_error
        return out


class WebhookStore:
    def __init__(self, client: redis.Redis, keys: Keys, *, ttl_seconds: int = 86400,
                 due_seconds: float = 5.0) -> None:
        self.r = client
        self.keys = keys
        self.ttl = ttl_seconds
        self.due_seconds = due_seconds
        self._create = client.register_script(_CREATE)

    # -- due -----------------------------------------------------------------------------
    def arm_op(self, wid: str) -> Op:
        """Make the message due (unless it already is): for a terminal write's round trip."""
        return Op(("ZADD", self.keys.due, "NX", deadline_ms(self.due_seconds), due_member(wid)))

    def arm(self, wid: str) -> None:
        self.arm_op(wid).run(self.r)

    def forget(self, wid: str) -> None:
        self.r.zrem(self.keys.due, due_member(wid))

    # -- the log -------------------------------------------------------------------------
    def create(self, d: Delivery) -> bool:
        """Write the delivery unless it exists, and index it under its owner; True if written."""
        d.created_at = d.created_at or time.time()
        fields = _fields(d)
        flat = [x for kv in fields.items() for x in kv]
        wrote = bool(self._create(keys=[self.keys.webhook(d.webhook_id)], args=[self.ttl, *flat]))
        index = self.keys.owner_webhooks(d.owner_kind, d.owner_id)
        pipe = self.r.pipeline(transaction=False)
        pipe.zadd(index, {d.webhook_id: d.created_at}, nx=True)
        pipe.expire(index, self.ttl)
        pipe.execute()
        return wrote

    def load(self, wid: str) -> Delivery | None:
        raw = self.r.hgetall(self.keys.webhook(wid))
        if not raw:
            return None
        f = {text(k): text(v) for k, v in raw.items()}
        return Delivery(
            webhook_id=f.get("webhook_id", wid), type=f.get("type", ""), url=f.get("url", ""),
            owner_kind=f.get("owner_kind", ""), owner_id=f.get("owner_id", ""), body=f.get("body", ""),
            status=f.get("status", "pending"), attempts=int(f.get("attempts") or 0),
            last_status_code=int(f["last_status_code"]) if f.get("last_status_code") else None,
            last_error=f.get("last_error") or None,
            next_attempt_at=float(f["next_attempt_at"]) if f.get("next_attempt_at") else None,
            created_at=float(f.get("created_at") or 0), tenant=owner_of(f.get("tenant")))

    def attempted(self, d: Delivery) -> None:
        """Save an attempt's outcome (``d`` as updated) and move its due member: at the next
        attempt's time while pending, gone once final. One round trip."""
        pipe = self.r.pipeline(transaction=False)
        key = self.keys.webhook(d.webhook_id)
        pipe.hset(key, mapping=_fields(d))
        pipe.expire(key, self.ttl)
        member = due_member(d.webhook_id)
        if d.status == "pending" and d.next_attempt_at is not None:
            pipe.zadd(self.keys.due, {member: int(d.next_attempt_at * 1000)})
        else:
            pipe.zrem(self.keys.due, member)
        pipe.execute()

    # -- the owners (runs, DAGs, batches) -------------------------------------------------
    def _owner_key(self, kind: str, owner_id: str) -> str:
        return {"run": self.keys.run, "dag": self.keys.dag, "batch": self.keys.batch}[kind](owner_id)

    def owner_exists(self, kind: str, owner_id: str) -> bool:
        return bool(self.r.exists(self._owner_key(kind, owner_id)))

    def owner_fields(self, kind: str, owner_id: str, names: tuple[str, ...]) -> dict[str, str | None]:
        """Fields of a run's, DAG's or batch's hash (None where unset): what a message is built from."""
        values = self.r.hmget(self._owner_key(kind, owner_id), list(names))
        return dict(zip(names, (None if v is None else text(v) for v in values), strict=True))

    def list_for(self, kind: str, owner_id: str, tenant: str | None = None) -> list[dict[str, Any]]:
        """The owner's deliveries, oldest first (``GET /v1/runs/{id}/webhooks``); with
        ``tenant``, only those of that tenant."""
        wids = [text(w) for w in self.r.zrange(self.keys.owner_webhooks(kind, owner_id), 0, -1)]
        return [d.public() for w in wids
                if (d := self.load(w)) is not None and (tenant is None or d.tenant == tenant)]


def _fields(d: Delivery) -> dict[Any, str | int | float]:
    out: dict[Any, str | int | float] = {
        "webhook_id": d.webhook_id, "type": d.type, "url": d.url, "owner_kind": d.owner_kind,
        "owner_id": d.owner_id, "tenant": d.tenant, "body": d.body, "status": d.status,
        "attempts": d.attempts,
        "last_status_code": "" if d.last_status_code is None else d.last_status_code,
        "last_error": d.last_error or "",
        "next_attempt_at": "" if d.next_attempt_at is None else f"{d.next_attempt_at:.3f}",
        "updated_at": f"{time.time():.6f}",
    }
    if d.created_at:
        out["created_at"] = f"{d.created_at:.6f}"
    return out
