"""HTTP batches (``POST /v1/batches``): kept in Redis and driven by a thread of the gateway
that holds the batch's lease, so a batch whose gateway died is picked up by the next one."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, NotRequired, TypedDict, cast

import redis

from reactq.dispatcher.batch.driver import BatchDriver
from reactq.dispatcher.batch.items import BatchItem, Tally
from reactq.shared.tenants.tenancy import DEFAULT_TENANT, owner_of
from reactq.shared.errors import ConfigError
from reactq.shared.keys import Keys
from reactq.shared.stores.listing import batch_index
from reactq.shared.stores.webhooks import Delivery, WebhookStore
from reactq.shared.webhooks import body, webhook_id
from reactq.shared.wire import WEBHOOK, WEBHOOKS_QUEUE

log = logging.getLogger(__name__)


class BatchView(TypedDict):
    """A batch's progress as ``BatchStore.view`` reads it: what ``GET /v1/batches/{id}``
    answers (``reactq.shared.api.BatchStatus``), plus its owner and its dollar figures. The
    keys marked not required are there only when they say something."""

    batch_id: str
    status: str
    total: int
    done: int
    succeeded: int
    failed: int
    invalid: int
    running: int
    queued: int
    tokens: int
    cost_usd: float
    created_at: float
    updated_at: float
    tenant: str
    skipped: NotRequired[int]
    """With a token budget, a stop, or skipped lines."""
    token_budget: NotRequired[int | None]
    stopped: NotRequired[str | None]
    cost_budget_usd: NotRequired[float]
    """With a dollar budget."""
    results: NotRequired[list[dict[str, Any]]]
    """The result lines, when asked for."""
    waiting: NotRequired[int]
    """Of the running lines, those waiting for a person (the gateway adds it)."""


class BatchStore:
    """HTTP batches in Redis, all under ``reactq:batch:{id}`` (a hash):
    ``status`` (running/done), ``total``, ``concurrency``, ``created_at``, ``updated_at``,
    ``running``, ``items`` (JSON), one ``result:{line}`` field per finished line.
    ``reactq:batch:{id}:driver`` is the driving gateway's lease (SET NX PX), so a batch whose
    gateway died is picked up by the next gateway that starts."""

    LEASE_MS = 15_000

    def __init__(self, r: redis.Redis, keys: Keys, ttl_seconds: int) -> None:
        self.r = r
        self.keys = keys
        self.ttl = ttl_seconds

    def create(self, items: list[BatchItem], concurrency: int, token_budget: int | None = None, *,
               tenant: str = DEFAULT_TENANT, cost_budget_usd: float | None = None,
               webhook: dict[str, Any] | None = None, batch_id: str | None = None,
               results: list[dict[str, Any]] | None = None, forked_from: str | None = None) -> str:
        """A new batch (``batch_id``: its id, else a new one). A fork of a batch
        (``dispatcher/batch/fork.py``) names ``forked_from`` and brings the ``results`` of the
        lines it keeps: written with the batch, so its driver never submits them."""
        batch_id = batch_id or uuid.uuid4().hex
        now = f"{time.time():.6f}"
        batch_index(self.r, self.keys, self.ttl).add(batch_id, float(now))  # before the batch
        self.r.hset(self.keys.batch(batch_id), mapping={
            "status": "running", "total": len(items), "concurrency": concurrency, "running": 0,
            "created_at": now, "updated_at": now, "tenant": tenant,
            **({"cost_budget_usd": repr(cost_budget_usd)} if cost_budget_usd is not None else {}),
            "items": json.dumps([it.to_dict() for it in items], ensure_ascii=False),
            **({"token_budget": token_budget} if token_budget is not None else {}),
            **({"webhook": json.dumps(webhook)} if webhook is not None else {}),
            **({"forked_from": forked_from} if forked_from else {}),
            **{f"result:{res['line']}": json.dumps(res, ensure_ascii=False) for res in results or []},
        })
        return batch_id

    def webhook(self, batch_id: str) -> dict[str, Any] | None:
        raw = self.r.hget(self.keys.batch(batch_id), "webhook")
        return json.loads(raw) if raw else None

    def tenant(self, batch_id: str) -> str:
        return owner_of(self.r.hget(self.keys.batch(batch_id), "tenant"))

    def eval_of(self, batch_id: str) -> str | None:
        """The eval whose cases the batch runs (None: a plain batch)."""
        raw = self.r.hget(self.keys.batch(batch_id), "eval_id")
        return raw.decode() if isinstance(raw, bytes) else raw or None

    def cost_budget(self, batch_id: str) -> float | None:
        raw = self.r.hget(self.keys.batch(batch_id), "cost_budget_usd")
        return float(raw) if raw else None

    def token_budget(self, batch_id: str) -> int | None:
        raw = self.r.hget(self.keys.batch(batch_id), "token_budget")
        return int(raw) if raw else None

    def request_cancel(self, batch_id: str) -> bool:
        """Mark the batch cancelled (its driver cancels the runs, skips the rest); False if unknown."""
        if not self.exists(batch_id):
            return False
        self.r.hset(self.keys.batch(batch_id), "cancel", "1")
        return True

    def cancel_requested(self, batch_id: str) -> bool:
        return self.r.hget(self.keys.batch(batch_id), "cancel") == b"1"

    def exists(self, batch_id: str) -> bool:
        return bool(self.r.exists(self.keys.batch(batch_id)))

    def items(self, batch_id: str) -> tuple[list[BatchItem], int, set[int]]:
        """(items, concurrency, lines that already have a result)."""
        raw = cast(dict[bytes, bytes], self.r.hgetall(self.keys.batch(batch_id)))
        f = {k.decode(): v for k, v in raw.items()}
        items = [BatchItem.from_dict(x) for x in json.loads(f["items"])]
        done = {int(k.split(":", 1)[1]) for k in f if k.startswith("result:")}
        return items, int(f.get("concurrency", b"8")), done

    def add_result(self, batch_id: str, res: dict[str, Any], running: int | None = None) -> None:
        """Record a line's result; ``running``: the lines still in flight, written with it so
        that a reader never sees the line both done and running."""
        self.r.hset(self.keys.batch(batch_id), mapping={
            f"result:{res['line']}": json.dumps(res, ensure_ascii=False), "updated_at": f"{time.time():.6f}",
            **({} if running is None else {"running": str(running)})})

    def set_running(self, batch_id: str, running: int) -> None:
        self.r.hset(self.keys.batch(batch_id), "running", running)

    def finish(self, batch_id: str, stopped: str | None = None) -> None:
        key = self.keys.batch(batch_id)
        status = "cancelled" if stopped == "cancelled" else "done"
        fields: dict[str | bytes | bytearray | memoryview | int | float, str | int | bytes | bytearray | memoryview | float] = {"status": status, "running": 0, "updated_at": f"{time.time():.6f}"}
        if stopped:
            fields["stopped"] = stopped
        self.r.hset(key, mapping=fields)
        self.r.expire(key, self.ttl)
        self.r.delete(self._lease(batch_id))

    def view(self, batch_id: str, *, with_results: bool) -> BatchView | None:
        raw = cast(dict[bytes, bytes], self.r.hgetall(self.keys.batch(batch_id)))
        if not raw:
            return None
        f = {k.decode(): v.decode() for k, v in raw.items()}
        results = sorted((json.loads(v) for k, v in f.items() if k.startswith("result:")),
                         key=lambda x: int(x["line"]))
        t = Tally(total=int(f["total"]))
        for res in results:
            t.add(res)
        running = int(f.get("running", 0))
        view: BatchView = {
            "batch_id": batch_id, "status": f["status"], "total": t.total, "done": t.done,
            "succeeded": t.succeeded, "failed": t.failed, "invalid": t.invalid,
            "running": running, "queued": max(0, t.total - t.done - running), "tokens": t.tokens,
            "cost_usd": t.cost_usd,
            "created_at": float(f["created_at"]), "updated_at": float(f["updated_at"]),
            "tenant": f.get("tenant", DEFAULT_TENANT),
        }
        if "token_budget" in f or "stopped" in f or t.skipped:
            view["skipped"] = t.skipped
            view["token_budget"] = int(f["token_budget"]) if "token_budget" in f else None
            view["stopped"] = f.get("stopped")
        if "cost_budget_usd" in f:
            view["cost_budget_usd"] = float(f["cost_budget_usd"])
        if with_results:
            view["results"] = results
        return view

    # -- the driving gateway's lease -------------------------------------------------------
    def _lease(self, batch_id: str) -> str:
        return self.keys.batch_driver(batch_id)

    def claim(self, batch_id: str, holder: str) -> bool:
        return bool(self.r.set(self._lease(batch_id), holder, nx=True, px=self.LEASE_MS))

    def renew(self, batch_id: str, holder: str) -> None:
        self.r.set(self._lease(batch_id), holder, px=self.LEASE_MS)

    def release(self, batch_id: str) -> None:
        self.r.delete(self._lease(batch_id))

    def unfinished(self) -> list[str]:
        """Ids of batches still ``running`` (candidates for resuming at gateway start)."""
        out = []
        # SCAN patterns take braces literally; on a cluster redis-py scans every primary.
        for key in self.r.scan_iter(match=self.keys.batch("*"), count=1000, _type="HASH"):
            name = self.keys.batch_id_of(key.decode())
            if name is not None and self.r.hget(key, "status") == b"running":
                out.append(name)
        return out


def drive_stored_batch(dispatcher: Any, store: BatchStore, batch_id: str, holder: str,
                       stop: threading.Event, *, on_line: Callable[[dict[str, Any]], None] | None = None,
                       on_progress: Callable[[Tally], None] | None = None) -> None:
    """Drive one HTTP batch to its end (in a thread of the gateway). ``on_line``: each
    result line once it is stored (an eval scores it); ``on_progress``: the tally each tick."""
    items, concurrency, done = store.items(batch_id)
    todo = [it for it in items if it.line not in done]
    last_renew = time.monotonic()

    def tick(t: Tally) -> None:
        nonlocal last_renew
        store.set_running(batch_id, t.running)
        if time.monotonic() - last_renew > BatchStore.LEASE_MS / 3000:
            store.renew(batch_id, holder)
            last_renew = time.monotonic()
        if on_progress is not None:
            on_progress(t)

    def result(res: dict[str, Any]) -> None:
        store.add_result(batch_id, res, driver.tally.running)
        if on_line is not None:
            on_line(res)

    driver = BatchDriver(dispatcher, f"http-batch:{batch_id}", concurrency, on_result=result,
                         on_tick=tick, stop=stop,
                         batch_id=batch_id, token_budget=store.token_budget(batch_id),
                         cancelled=lambda: store.cancel_requested(batch_id), tenant=store.tenant(batch_id),
                         cost_budget_usd=store.cost_budget(batch_id))
    try:
        driver.run(todo)
    except (redis.RedisError, ConfigError):
        log.exception("batch %s stopped; the next gateway start resumes it", batch_id)
        return
    if stop.is_set():
        store.release(batch_id)  # let another gateway resume it now, not in LEASE_MS
        return
    hook = batch_webhook(dispatcher, store, batch_id, driver.tally)
    store.finish(batch_id, driver.tally.stopped)
    if hook is not None:
        dispatcher.send(WEBHOOK, [hook], WEBHOOKS_QUEUE)


def batch_webhook(dispatcher: Any, store: BatchStore, batch_id: str, tally: Tally) -> str | None:
    """Store and arm the batch's ``batch.done`` message before its terminal write (a crash
    after it leaves the message due); returns its id, or None without a webhook."""
    spec = store.webhook(batch_id)
    if spec is None or "done" not in (spec.get("events") or ["done"]):
        return None
    view: Mapping[str, object] = store.view(batch_id, with_results=False) or {}
    counts = {k: view.get(k) for k in ("total", "done", "succeeded", "failed", "invalid")}
    data = {"batch_id": batch_id, "status": "cancelled" if tally.stopped == "cancelled" else "done",
            "answer": None, "output": None, "usage": {"total_tokens": view.get("tokens", tally.tokens)},
            **counts, "skipped": tally.skipped, "stopped": tally.stopped, "tenant": store.tenant(batch_id)}
    wid = webhook_id("batch", batch_id)
    s = dispatcher.settings
    hooks = WebhookStore(store.r, store.keys, ttl_seconds=s.run_ttl_seconds, due_seconds=s.due_seconds)
    hooks.create(Delivery(webhook_id=wid, type="batch.done", url=spec["url"], owner_kind="batch",
                          owner_id=batch_id, body=body("batch.done", data, time.time()),
                          tenant=store.tenant(batch_id)))
    hooks.arm(wid)
    return wid


def holder_name() -> str:
    return f"{os.uname().nodename}:{os.getpid()}"
