"""Webhook deliveries on the workers: the ``reactq.webhook`` task's work, and how a terminal
state (or an approval request) makes a message due.

One task = one attempt. It holds the message's lease (``webhook:<webhook_id>``) while it
POSTs, so a second delivery of the same message backs off; the delivery log
(``reactq.shared.stores.webhooks``) says whether the message is still pending and when its
next attempt is due; the ``due`` set brings it back when its retry is due or its worker
died (``workers/recovery/watchdog.py``): no Celery countdown, no broker visibility timeout involved.

A terminal run arms its message in the commit's round trip (``workers/runs/drive.py``), a DAG
before its terminal commit, a batch before its terminal write; then the ``reactq.webhook``
task is sent. If the process dies in between, the watchdog sends it. The first attempt builds
the message from the stored owner (its record: status, result, the time it ended), so every
builder makes the same message and the first to store it wins.

Each attempt resolves the URL's host again, checks every address with the ``http_fetch``
SSRF guard (``REACTQ_WEBHOOK_ALLOW`` lets a deployment reach internal receivers) and connects
to the checked address; redirects are not followed (a 3xx is final, like other non-retried
answers).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any

import httpx2
import redis
from standardwebhooks import Webhook

from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.requests import WebhookSpec
from reactq.shared.settings import Settings
from reactq.shared.stores.webhooks import Delivery, WebhookStore
from reactq.shared.tenants.tenancy import owner_of
from reactq.shared.tools.netguard import Allowlist, FetchRefused, guarded_transport
from reactq.shared.webhooks import (
    APPROVAL_TYPE, DONE_TYPES, body, due_member, judge, parse_webhook_id, retry_delay, run_data, webhook_id,
)
from reactq.shared.wire import WEBHOOK, WEBHOOKS_QUEUE
from reactq.shared.stores.due import Member
from reactq.workers.app import app
from reactq.workers.recovery.watchdog import DueWatchdog, Handler
from reactq.workers.runtime import Runtime

log = logging.getLogger(__name__)

Send = Callable[[str, list[Any], str], None]
ALLOW_SETTING = "REACTQ_WEBHOOK_ALLOW"
#: Run-record fields a ``run.done`` message carries beside the result, when set.
_RUN_EXTRAS = ("batch_id", "thread_id", "schedule_id", "scheduled_for", "tenant")


@cache
def store(rt: Runtime) -> WebhookStore:
    s = rt.settings
    return WebhookStore(rt.redis, rt.keys, ttl_seconds=s.run_ttl_seconds, due_seconds=s.due_seconds)


def spec_of(raw: Any) -> WebhookSpec | None:
    """The webhook a stored request carries (None when it has none or it is unreadable)."""
    if not isinstance(raw, dict):
        return None
    try:
        return WebhookSpec.model_validate(raw)
    except ValueError:
        return None


# -- making a message due ------------------------------------------------------------------

def enqueue_webhook(rt: Runtime, msg_type: str, data: dict[str, Any], *, webhook: Any,
                    owner: tuple[str, str], key: str, send: Send) -> str | None:
    """Store, arm and send one message of ``msg_type`` (e.g. ``approval.requested``) about
    ``key`` (e.g. the approval id) to ``webhook`` (a ``WebhookSpec`` or its dict), filed under
    ``owner`` = (``run`` | ``dag`` | ``batch``, id) in the delivery log. Nothing when the
    webhook does not ask for that event. Returns the webhook id. Safe to call twice."""
    spec = webhook if isinstance(webhook, WebhookSpec) else spec_of(webhook)
    event = "approval.requested" if msg_type == APPROVAL_TYPE else "done"
    if spec is None or not spec.wants(event):
        return None
    kind = "approval" if msg_type == APPROVAL_TYPE else owner[0]
    wid = webhook_id(kind, key)
    st = store(rt)
    tenant = owner_of(st.owner_fields(owner[0], owner[1], ("tenant",))["tenant"])
    st.create(Delivery(webhook_id=wid, type=msg_type, url=spec.url, owner_kind=owner[0],
                       owner_id=owner[1], body=body(msg_type, data, time.time()), tenant=tenant))
    st.arm(wid)
    send(WEBHOOK, [wid], WEBHOOKS_QUEUE)
    return wid


def approval_requested(rt: Runtime, run_id: str, approval: dict[str, Any]) -> None:
    """Send ``approval.requested`` for a new approval of ``run_id`` when the run's webhook
    asks for it. Never raises: a message that cannot be made costs the message, not the call."""
    try:
        raw = store(rt).owner_fields("run", run_id, ("request",))["request"]
        hook = json.loads(raw).get("webhook") if raw else None
        if hook is not None:
            enqueue_webhook(rt, APPROVAL_TYPE, dict(approval), webhook=hook, owner=("run", run_id),
                            key=str(approval["approval_id"]), send=_send)
    except Exception:
        log.exception("run %s: the approval.requested webhook was not made", run_id)


def _send(task: str, args: list[Any], queue: str) -> None:
    app.send_task(task, args=args, queue=queue, argsrepr=repr(args), kwargsrepr="{}")


def wants_done(rt: Runtime, kind: str, owner_id: str) -> bool:
    """Whether the stored request of a run or DAG has a webhook that wants its ``done`` message."""
    raw = store(rt).owner_fields(kind, owner_id, ("request",))["request"]
    spec = spec_of(json.loads(raw).get("webhook")) if raw else None
    return spec is not None and spec.wants("done")


def send_done(kind: str, owner_id: str, send: Send) -> None:
    """Send the delivery of an owner's ``*.done`` message (already armed)."""
    send(WEBHOOK, [webhook_id(kind, owner_id)], WEBHOOKS_QUEUE)


def _materialize(rt: Runtime, wid: str) -> Delivery | None:
    """Build the ``*.done`` message from its owner's stored record (None when the owner is
    gone, not over yet, or wants no such message) and store it, unless someone did first."""
    parsed = parse_webhook_id(wid)
    if parsed is None or parsed[0] not in ("run", "dag"):
        return None
    kind, owner_id = parsed
    f = store(rt).owner_fields(kind, owner_id, ("status", "request", "result", "updated_at", *_RUN_EXTRAS))
    if f["status"] not in TERMINAL_STATUSES or not f["request"]:
        return None
    request = json.loads(f["request"])
    spec = spec_of(request.get("webhook"))
    if spec is None or not spec.wants("done"):
        return None
    result = json.loads(f["result"]) if f["result"] else None
    extra = {k: f[k] for k in _RUN_EXTRAS}
    data = (run_data(owner_id, f["status"], result, request, extra) if kind == "run"
            else {**dag_data(owner_id, f["status"], result, request), "tenant": owner_of(f["tenant"])})
    msg_type = DONE_TYPES[kind]
    st = store(rt)
    st.create(Delivery(webhook_id=wid, type=msg_type, url=spec.url, owner_kind=kind, owner_id=owner_id,
                       body=body(msg_type, data, float(f["updated_at"] or time.time())),
                       tenant=owner_of(f["tenant"])))
    return st.load(wid)


def dag_data(dag_id: str, status: str, result: dict[str, Any] | None,
             request: dict[str, Any]) -> dict[str, Any]:
    res = result or {}
    return {"dag_id": dag_id, "status": status, "answer": res.get("answer"), "output": res.get("output"),
            "usage": res.get("usage") or {}, "rounds": res.get("rounds"), "achieved": res.get("achieved"),
            "elapsed": res.get("elapsed"), "error": res.get("error"), "metadata": request.get("metadata") or {}}


# -- one attempt ---------------------------------------------------------------------------

def deliver(rt: Runtime, wid: str) -> None:
    """The ``reactq.webhook`` task: one attempt of ``wid``'s message, if it is due."""
    with rt.leases.hold_only(due_member(wid), WEBHOOK, [wid], WEBHOOKS_QUEUE, wait=0) as held:
        if held:
            _deliver_held(rt, wid)


def _deliver_held(rt: Runtime, wid: str) -> None:
    st = store(rt)
    d = st.load(wid) or _materialize(rt, wid)
    if d is None or d.status != "pending":
        st.forget(wid)  # nothing to send (the owner is not over, gone) or already final
        return
    if d.next_attempt_at is not None and d.next_attempt_at > time.time() + 0.05:
        return  # an early duplicate: the due set holds the retry's time
    began = time.time()
    answer = attempt(rt.settings, d)
    _record(rt, st, d, answer, time.time() - began)


@dataclass(frozen=True)
class Answer:
    """What one POST got: the status code (None = no answer) and why, when it failed."""

    status_code: int | None
    retry_after: str | None = None
    error: str | None = None
    refused: bool = False


def attempt(settings: Settings, d: Delivery) -> Answer:
    """POST the message once, signed, through the SSRF guard, within the timeout."""
    secret = settings.webhook_secret.get_secret_value() if settings.webhook_secret else ""
    if not secret:
        return Answer(None, error="REACTQ_WEBHOOK_SECRET is not set: the message cannot be signed",
                      refused=True)
    now = datetime.now(UTC)
    headers = {
        "content-type": "application/json", "user-agent": "reactq-webhooks/1",
        "webhook-id": d.webhook_id, "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(d.webhook_id, now, d.body.encode()),
    }
    timeout = settings.webhook_timeout_s
    try:
        allow = Allowlist.parse(settings.webhook_allow, ALLOW_SETTING)
        return asyncio.run(asyncio.wait_for(_post(d.url, headers, d.body, allow, timeout), timeout))
    except TimeoutError:
        return Answer(None, error=f"no answer within {timeout:g} s")
    except ValueError as exc:  # a bad REACTQ_WEBHOOK_ALLOW
        return Answer(None, error=str(exc), refused=True)


async def _post(url: str, headers: dict[str, str], content: str, allow: Allowlist,
                timeout: float) -> Answer:
    try:
        async with httpx2.AsyncClient(transport=guarded_transport(allow, ALLOW_SETTING), trust_env=False,
                                      follow_redirects=False, timeout=timeout) as client:
            resp = await client.post(url, content=content.encode(), headers=headers)
            return Answer(resp.status_code, resp.headers.get("retry-after"))
    except FetchRefused as exc:
        return _refused(exc)
    except httpx2.HTTPError as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, FetchRefused):
            return _refused(cause)
        return Answer(None, error=f"{type(exc).__name__}: {exc}"[:300])


def _refused(exc: FetchRefused) -> Answer:
    """A guard refusal is final, except a name that did not resolve (DNS may come back)."""
    return Answer(None, error=str(exc)[:300], refused="cannot resolve" not in str(exc))


def _record(rt: Runtime, st: WebhookStore, d: Delivery, answer: Answer, seconds: float) -> None:
    s = rt.settings
    now = time.time()
    verdict = judge(answer.status_code, answer.retry_after, now)
    d.attempts += 1
    d.last_status_code = answer.status_code
    d.last_error = answer.error or (None if verdict.outcome == "delivered" else f"HTTP {answer.status_code}")
    outcome: str = verdict.outcome
    if answer.refused:
        outcome = "refused"
        d.status, d.next_attempt_at = "failed", None
    elif verdict.outcome == "delivered":
        d.status, d.next_attempt_at = "delivered", None
    elif verdict.outcome == "retry" and d.attempts < s.webhook_max_attempts:
        d.next_attempt_at = now + retry_delay(d.attempts, s.webhook_backoff_s, verdict.retry_after)
    else:
        d.status, d.next_attempt_at = "failed", None
    st.attempted(d)
    log.info("webhook %s attempt %s: %s (%s)", d.webhook_id, d.attempts, outcome,
             answer.status_code or answer.error)
    _metrics(rt, d, outcome, seconds)


def _metrics(rt: Runtime, d: Delivery, outcome: str, seconds: float) -> None:
    try:
        b = rt.recorder.batch()
        b.inc("webhook_attempts", [d.type, outcome]).observe("webhook_attempt_seconds", [d.type], seconds)
        if d.status != "pending":
            b.inc("webhook_deliveries", [d.type, d.status])
        b.send()
    except redis.RedisError:
        log.warning("webhook metrics for %s were not recorded", d.webhook_id)


def resend(wd: DueWatchdog, member: str, m: Member, died: bool) -> None:
    """The watchdog's handler: a message whose retry is due, or whose worker died mid-attempt
    (counted: at ``REACTQ_MAX_TASK_CRASHES`` it is ``failed``, not sent again)."""
    d = store(wd.rt).load(m.owner)
    if d is not None and d.status != "pending":
        wd.forget(member)
        return
    if d is not None and died:
        crashes = wd.crashes.count(wd.rt.keys.webhook(m.owner), "due_n", d.attempts, died)
        if crashes >= wd.crashes.limit:
            log.error("webhook %s: its worker stopped %s times; not sent again", m.owner, crashes)
            give_up(wd.rt, m.owner, crashes)
            return
    wd.send(WEBHOOK, [m.owner], WEBHOOKS_QUEUE)


HANDLERS: dict[str, Handler] = {"webhook": resend}


def give_up(rt: Runtime, wid: str, crashes: int) -> None:
    """The message's worker died ``crashes`` times mid-attempt: stop trying (``failed``)."""
    st = store(rt)
    d = st.load(wid)
    if d is None or d.status != "pending":
        st.forget(wid)
        return
    d.status, d.next_attempt_at = "failed", None
    d.last_error = f"the worker delivering it stopped {crashes} times (REACTQ_MAX_TASK_CRASHES)"
    st.attempted(d)
    _metrics(rt, d, "crashed", 0.0)
