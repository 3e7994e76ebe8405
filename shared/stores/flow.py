"""Cluster-wide flow control for one model: RPM, TPM, calls in flight, provider pauses.

State lives in Redis, one hash + two sorted sets per model (``Keys.flow_*``; the model name
is the hash tag, so one model's keys share a Cluster slot), and every decision is one Lua
script call: one round trip, atomic across every worker and gateway.

The rate math is GCRA (the generic cell rate algorithm) with zero burst tolerance, once for
requests and once for tokens: each admitted call moves a "theoretical arrival time" forward
by ``60 / rpm`` seconds (requests) and ``tokens * 60 / tpm`` seconds (tokens), and a call
may start only once both times have been reached. Calls are therefore *spread out* at the
limit's pace instead of a minute's worth passing at once (a plain token bucket's burst,
which providers answer with 429s); in any 60 s window at most ``rpm`` (+1) requests start.
A call reserves its estimated tokens and ``settle`` moves the token time back by what was
over-reserved (or forward by what was under-reserved) once the provider reports usage.
Estimates (characters / 4 + the completion allowance) are scaled by a ratio each model
learns from its reported usage (a moving average of actual / estimated), so a model whose
prompts tokenize densely, or whose completions are short, is not throttled by phantom tokens.

A call that would start more than ``horizon`` from now is not admitted: it gets a
``wait_s`` and joins a waiting line (one per priority). Waiters are admitted in line order
(first come, first served), and a ``batch`` waiter only when no ``interactive`` one waits,
so interactive runs take capacity first. A waiter that does not come back within its
wait + ``grace`` loses its place (it crashed or was cancelled). A provider 429 / 503 with
``Retry-After`` calls ``pause``: nobody is admitted for that model until then.

A model without limits is admitted on one read, its pause (no script, nothing reserved), and
its settle only adds the call to the last minute's use; the script runs for it only while a
pause is set, and the admission that finds the pause over and nobody waiting removes it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

import redis

from reactq.shared.keys import Keys
from reactq.shared.stores.roundtrip import Op, checked, defer, execute, failed, take

Priority = Literal["interactive", "batch"]

# KEYS: state hash, in-flight zset, interactive line zset, batch line zset.
# ARGV: now_ms, member, prio ('i'/'b'), req_iv_ms, tok_iv_ms (per token), est tokens,
#       max_concurrency (0 = none), horizon_ms, lease_ms, call id, grace_ms, tpm (0 = none).
# Returns {granted 0/1, start_or_wait_ms, reason, reserved tokens}.
_ACQUIRE = """
local now = tonumber(ARGV[1])
local member, prio = ARGV[2], ARGV[3]
local riv, tiv, est = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local maxc, horizon, lease = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local callid, grace = ARGV[10], tonumber(ARGV[11])
local line = KEYS[3]
if prio == 'b' then line = KEYS[4] end
-- estimates are scaled by what calls of this model really used (settle keeps the ratio)
local ratio = tonumber(redis.call('HGET', KEYS[1], 'ratio') or '1')
est = math.ceil(est * ratio)
if tonumber(ARGV[12]) > 0 then est = math.min(est, tonumber(ARGV[12])) end
-- the pace of the line: what an average call costs (tokens as reported, learnt at settle);
-- optimistic before anything was learnt, so waiters come back early rather than late
local avg = tonumber(redis.call('HGET', KEYS[1], 'avg') or '0')
local per = math.max(riv, avg * tiv, 1)
-- waiters that never came back lose their place (look at a few heads per call)
for _, ln in ipairs({KEYS[3], KEYS[4]}) do
  local heads = redis.call('ZRANGE', ln, 0, 4)
  for _, m in ipairs(heads) do
    local dl = tonumber(redis.call('HGET', KEYS[1], 'dl:' .. m) or '0')
    if dl < now then
      redis.call('ZREM', ln, m)
      redis.call('HDEL', KEYS[1], 'dl:' .. m)
    end
  end
end
local function wait(ms, reason)
  if redis.call('ZSCORE', line, member) == false then redis.call('ZADD', line, now, member) end
  local rank = redis.call('ZRANK', line, member)
  if prio == 'b' then rank = rank + redis.call('ZCARD', KEYS[3]) end
  ms = math.max(ms, 0) + rank * per
  if ms < 20 then ms = 20 end
  redis.call('HSET', KEYS[1], 'dl:' .. member, now + ms + grace)
  return {0, math.floor(ms), reason, est}
end
local pause = tonumber(redis.call('HGET', KEYS[1], 'pause') or '0')
if pause > now then return wait(pause - now, 'paused') end
-- first come, first served: only the first few of the line may go
local slots = math.max(1, math.floor(horizon / per))
local rank = redis.call('ZRANK', line, member)
if rank == false then rank = redis.call('ZCARD', line) end
if prio == 'b' then rank = rank + redis.call('ZCARD', KEYS[3]) end
if rank >= slots then return wait(0, 'line') end
if maxc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  -- a slot that frees goes to the head of the line (interactive first): whoever is ranked
  -- behind waiters takes only a slot that is free after theirs
  if redis.call('ZCARD', KEYS[2]) + rank >= maxc then return wait(per, 'concurrency') end
end
local rtat = tonumber(redis.call('HGET', KEYS[1], 'rtat') or '0')
local ttat = tonumber(redis.call('HGET', KEYS[1], 'ttat') or '0')
local start = math.max(now, rtat, ttat)
if start - now > horizon then return wait(start - now - horizon, 'rate') end
if riv > 0 then redis.call('HSET', KEYS[1], 'rtat', start + riv) end
if tiv > 0 then redis.call('HSET', KEYS[1], 'ttat', start + est * tiv) end
if maxc > 0 then redis.call('ZADD', KEYS[2], start + lease, callid) end
redis.call('ZREM', line, member)
redis.call('HDEL', KEYS[1], 'dl:' .. member)
redis.call('HINCRBY', KEYS[1], 'reserved', est)
-- a pause that is over, with nobody left waiting behind it, goes: the calls of a model
-- without limits then pass on the pause's read alone (``FlowLimiter.acquire``)
if pause ~= 0 and redis.call('ZCARD', KEYS[3]) + redis.call('ZCARD', KEYS[4]) == 0 then
  redis.call('HDEL', KEYS[1], 'pause')
end
return {1, math.floor(start - now), 'ok', est}
"""

# KEYS: state hash, in-flight zset, window zset. ARGV: now_ms, call id, tok_iv_ms, reserved,
# actual, raw estimate (0 = the call failed: no learning).
_SETTLE = """
local now, tiv = tonumber(ARGV[1]), tonumber(ARGV[3])
local reserved, actual, raw = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
if raw > 0 and actual > 0 then
  -- a running mean over the first calls, then a moving average (weight 0.2): the first
  -- settled call already corrects an estimate that is far off
  local n = redis.call('HINCRBY', KEYS[1], 'learnt', 1)
  local w = math.max(0.2, 1 / n)
  local ratio = tonumber(redis.call('HGET', KEYS[1], 'ratio') or '1')
  ratio = (1 - w) * ratio + w * (actual / raw)
  local avg = tonumber(redis.call('HGET', KEYS[1], 'avg') or '0')
  redis.call('HSET', KEYS[1], 'ratio', math.min(4, math.max(0.02, ratio)), 'avg', (1 - w) * avg + w * actual)
end
redis.call('ZREM', KEYS[2], ARGV[2])
if tiv > 0 then
  local ttat = tonumber(redis.call('HGET', KEYS[1], 'ttat') or '0')
  ttat = ttat + (actual - reserved) * tiv
  redis.call('HSET', KEYS[1], 'ttat', math.max(ttat, now))
end
redis.call('HINCRBY', KEYS[1], 'reserved', -reserved)
redis.call('HINCRBY', KEYS[1], 'used', actual)
redis.call('HINCRBY', KEYS[1], 'calls', 1)
redis.call('ZADD', KEYS[3], now, ARGV[2] .. ':' .. actual)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - 60000)
redis.call('PEXPIRE', KEYS[3], 120000)
return 1
"""

# KEYS: state hash. ARGV: until_ms. The later of two pauses wins.
_PAUSE = """
local cur = tonumber(redis.call('HGET', KEYS[1], 'pause') or '0')
local untl = tonumber(ARGV[1])
if untl > cur then redis.call('HSET', KEYS[1], 'pause', untl) return 1 end
return 0
"""


@dataclass(frozen=True)
class Limits:
    """A model's limits; ``None`` = unlimited."""

    rpm: int | None = None
    tpm: int | None = None
    max_concurrency: int | None = None

    @property
    def any(self) -> bool:
        return bool(self.rpm or self.tpm or self.max_concurrency)


@dataclass(frozen=True)
class Ticket:
    """An admitted call: ``start_in`` seconds from now it may go (≤ the horizon)."""

    model: str
    call_id: str
    reserved: int
    start_in: float
    estimate: int = 0
    """The caller's own estimate (before the learnt scaling)."""
    free: bool = False
    """Admitted on the pause's read alone (a model without limits): nothing was reserved,
    so its settle only records the call in the last minute's use."""


@dataclass(frozen=True)
class Denied:
    """Not admitted: come back in ``wait_s`` (your place in the line is kept meanwhile)."""

    model: str
    wait_s: float
    reason: str


class FlowLimiter:
    """The Redis side of flow control, shared by every model of a process."""

    def __init__(self, client: redis.Redis, keys: Keys, *, horizon_s: float = 0.5,
                 lease_s: float = 120.0, grace_s: float = 10.0) -> None:
        self.r = client
        self.keys = keys
        self.horizon_ms = horizon_s * 1000
        self.lease_ms = lease_s * 1000
        self.grace_ms = grace_s * 1000
        self._acquire = client.register_script(_ACQUIRE)
        self._settle = client.register_script(_SETTLE)
        self._pause = client.register_script(_PAUSE)
        self._trimmed: dict[str, float] = {}  # model → when this process last trimmed its window
        self._last_free: str | None = None  # the model last admitted without limits (pause_read)

    def _keys(self, model: str) -> list[str]:
        return [self.keys.flow(model), self.keys.flow_inflight(model),
                self.keys.flow_line(model, "interactive"), self.keys.flow_line(model, "batch")]

    def acquire(self, model: str, limits: Limits, *, member: str, priority: Priority,
                tokens: int) -> Ticket | Denied:
        """Admit one call of ``tokens`` estimated tokens, or say how long to wait."""
        call_id = uuid.uuid4().hex
        if not limits.any:
            free = self._acquire_free(model, call_id, max(0, tokens))
            if free is not None:
                return free
        riv = 60000.0 / limits.rpm if limits.rpm else 0.0
        tiv = 60000.0 / limits.tpm if limits.tpm else 0.0
        raw = max(1, tokens)
        # The script scales the estimate by the model's learnt actual/estimated ratio and caps
        # it at a minute's tokens (a larger reservation could never be admitted).
        # Writes a running step deferred (the settle of its last call: ``settle(later=True)``,
        # metrics) go out in this round trip, before the admission (``shared/stores/roundtrip.py``).
        ops = take()
        acquire = Op.call(self._acquire, self._keys(model), [
            _now_ms(), member, "b" if priority == "batch" else "i", riv, tiv, raw,
            limits.max_concurrency or 0, self.horizon_ms, self.lease_ms, call_id, self.grace_ms,
            limits.tpm or 0])
        replies = execute(self.r, [*ops, acquire])
        failed(replies[:-1])
        granted, ms, reason, est = checked(replies[-1])
        reason = reason.decode() if isinstance(reason, bytes) else str(reason)
        if int(granted):
            return Ticket(model=model, call_id=call_id, reserved=int(est), start_in=int(ms) / 1000,
                          estimate=raw)
        return Denied(model=model, wait_s=int(ms) / 1000, reason=reason)

    def _acquire_free(self, model: str, call_id: str, tokens: int) -> Ticket | None:
        """A model without limits has nothing to count before a call: it waits only while a
        provider's pause is in force, and that is one field to read (one command instead of the
        admission script). ``None`` while a pause is set: the script decides (a wait and a place
        in the line, or the admission that clears a pause that is over)."""
        seen = _seen.get()
        if seen is not None and model in seen:  # read with the step's first round trip
            pause = seen.pop(model)
        else:
            replies = execute(self.r, [*take(), Op(("HGET", self.keys.flow(model), "pause"))])
            failed(replies[:-1])
            pause = checked(replies[-1])
        self._last_free = model
        if pause is not None:
            return None
        return Ticket(model=model, call_id=call_id, reserved=tokens, start_in=0.0, estimate=tokens, free=True)

    def pause_read(self) -> tuple[str, Op] | None:
        """The read of the pause of the model this process last admitted without limits, for
        a step's first round trip to carry before the step knows which model it calls (most
        steps call the same model as the one before): ``seen_pauses`` keeps the reply, and the
        step's admission of that model uses it instead of a round trip of its own."""
        model = self._last_free
        return (model, Op(("HGET", self.keys.flow(model), "pause"))) if model is not None else None

    def settle(self, ticket: Ticket, limits: Limits, actual_tokens: int, *, learn: bool = True,
               later: bool = False) -> None:
        """The call ended: free its slot, correct the token reservation by what it used
        (and, with ``learn``, let the usage correct this model's future estimates).

        ``later``: with the running step's next round trip (``shared/stores/roundtrip.py``) — its
        read right after the call, or the next admission, which sends it first, so a step's
        next call never waits on its own last one; at once outside a step."""
        if ticket.free:
            self._settle_free(ticket, actual_tokens, later)
            return
        tiv = 60000.0 / limits.tpm if limits.tpm else 0.0
        op = Op.call(self._settle, [self.keys.flow(ticket.model), self.keys.flow_inflight(ticket.model),
                                    self.keys.flow_window(ticket.model)],
                     [_now_ms(), ticket.call_id, tiv, ticket.reserved, max(0, actual_tokens),
                      ticket.estimate if learn else 0])
        if later:
            defer(self.r, [op])
        else:
            op.run(self.r)

    def _settle_free(self, ticket: Ticket, actual_tokens: int, later: bool) -> None:
        """A call admitted without limits: into the last minute's use (``usage``) when it was
        made (an unused ticket leaves no trace). The window is trimmed, and its expiry renewed,
        on a process's first call of a model and then at most every ``_TRIM_EVERY_S``: ``usage``
        reads only the last minute, and the key outlives the last call by at least
        ``_WINDOW_TTL_MS - _TRIM_EVERY_S``."""
        if actual_tokens <= 0:
            return
        now = _now_ms()
        window = self.keys.flow_window(ticket.model)
        ops = [Op(("ZADD", window, now, f"{ticket.call_id}:{actual_tokens}"))]
        if now - self._trimmed.get(ticket.model, 0.0) > _TRIM_EVERY_S * 1000:
            self._trimmed[ticket.model] = now
            ops += [Op(("ZREMRANGEBYSCORE", window, "-inf", now - 60000)), Op(("PEXPIRE", window, _WINDOW_TTL_MS))]
        if later:
            defer(self.r, ops)
        else:
            failed(execute(self.r, ops))

    def pause(self, model: str, seconds: float) -> None:
        """Stop admitting calls to ``model`` for ``seconds`` (a provider's Retry-After)."""
        self._pause(keys=[self.keys.flow(model)], args=[_now_ms() + seconds * 1000])

    def usage(self, model: str) -> dict[str, Any]:
        """Current use: calls and tokens of the last 60 s, in flight, waiting, paused for."""
        now = _now_ms()
        pipe = self.r.pipeline(transaction=False)
        pipe.hmget(self.keys.flow(model), "pause", "reserved")
        pipe.zrangebyscore(self.keys.flow_window(model), now - 60000, "+inf")
        pipe.zcount(self.keys.flow_inflight(model), now, "+inf")
        pipe.zcard(self.keys.flow_line(model, "interactive"))
        pipe.zcard(self.keys.flow_line(model, "batch"))
        (pause, reserved), window, inflight, wi, wb = pipe.execute()
        tokens = sum(int(m.rsplit(b":", 1)[1]) for m in window)
        return {"rpm_used": len(window), "tpm_used": tokens, "in_flight": int(inflight),
                "reserved_tokens": int(reserved or 0),
                "waiting": {"interactive": int(wi), "batch": int(wb)},
                "paused_for_s": round(max(0.0, (float(pause or 0) - now) / 1000), 3)}


# Pauses read ahead by a step's first round trip (``pause_read``), by model, for this step only.
_seen: ContextVar[dict[str, Any] | None] = ContextVar("reactq_flow_pauses_seen", default=None)


@contextmanager
def seen_pauses() -> Iterator[dict[str, Any]]:
    """A step's box for the pauses its first round trip read (``FlowLimiter.pause_read``); each
    serves one admission, and what is left goes with the step."""
    box: dict[str, Any] = {}
    token = _seen.set(box)
    try:
        yield box
    finally:
        _seen.reset(token)


# The last minute's use of a model without limits (``_settle_free``).
_TRIM_EVERY_S = 10.0
_WINDOW_TTL_MS = 120000


def _now_ms() -> float:
    return time.time() * 1000


def dumps_limits(limits: Limits) -> str:
    return json.dumps({"rpm": limits.rpm, "tpm": limits.tpm, "max_concurrency": limits.max_concurrency})
