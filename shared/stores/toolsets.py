"""Which live worker offers which tool: each worker announces its tools and its own hand-on
queue (``toolsets``, renewed every few seconds, dropped when it stops), and every tool a worker
ever offered is remembered with its schema (``tools:offered``).

A tool call that reaches a worker lacking its tool is handed on to a worker that offers it
(``workers/runs/handon.py``); a call whose tool no live worker offers waits for one, its
start kept in ``run:{id}:toolwait``. A name no worker ever offered was made up by the model.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis

from reactq.shared.keys import Keys

#: A worker whose announcement is older than this is not counted as live.
LIVE_S = 10.0
#: Announcements this old are removed by whoever reads them (a worker killed with -9).
FORGET_S = 300.0


@dataclass(frozen=True)
class ToolSet:
    """One worker's announcement."""

    node: str
    tools: frozenset[str]
    queue: str
    at: float


def parse_toolsets(raw: dict[Any, Any], now: float) -> tuple[list[ToolSet], list[str]]:
    """``toolsets``' hash → (the live workers' sets, the nodes to forget)."""
    sets, forgotten = [], []
    for node, value in raw.items():
        node = node.decode() if isinstance(node, bytes) else str(node)
        try:
            entry = json.loads(value)
            ts = ToolSet(node, frozenset(entry["tools"]), str(entry["queue"]), float(entry["at"]))
        except (ValueError, KeyError, TypeError):
            forgotten.append(node)
            continue
        if now - ts.at > FORGET_S:
            forgotten.append(node)
        elif now - ts.at <= LIVE_S:
            sets.append(ts)
    return sets, forgotten


class ToolSets:
    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.r = client
        self.keys = keys

    def announce(self, node: str, tools: Iterable[str], queue: str, now: float | None = None) -> None:
        """``node`` is alive and offers ``tools`` (renewed every few seconds)."""
        entry = json.dumps({"tools": sorted(set(tools)), "queue": queue, "at": time.time() if now is None else now})
        self.r.hset(self.keys.toolsets, node, entry)

    def offer(self, schemas: Iterable[dict[str, Any]]) -> None:
        """Remember each tool's schema (as ``GET /v1/tools`` lists it) by name, once at start:
        workers lacking the tool show it to the model from here."""
        mapping: dict[Any, Any] = {str(e["name"]): json.dumps(e) for e in schemas}
        if mapping:
            self.r.hset(self.keys.tools_offered, mapping=mapping)

    def schemas(self, names: Iterable[str]) -> list[dict[str, Any]]:
        wanted = list(names)
        if not wanted:
            return []
        raw = self.r.hmget(self.keys.tools_offered, wanted)
        return [json.loads(v) for v in raw if v]

    def retire(self, node: str) -> None:
        """A worker that stops: its tools are no longer offered by it."""
        self.r.hdel(self.keys.toolsets, node)

    def live(self, now: float | None = None) -> list[ToolSet]:
        raw: dict[Any, Any] = self.r.hgetall(self.keys.toolsets)  # type: ignore[assignment]
        sets, forgotten = parse_toolsets(raw, time.time() if now is None else now)
        if forgotten:
            self.r.hdel(self.keys.toolsets, *forgotten)
        return sets

    def live_names(self) -> set[str]:
        """Every tool some live worker offers."""
        return {name for ts in self.live() for name in ts.tools}

    def queue_for(self, tool: str, exclude: str | None = None) -> str | None:
        """The hand-on queue of a live worker offering ``tool`` (one at random), else None."""
        queues = [ts.queue for ts in self.live() if tool in ts.tools and ts.node != exclude]
        return random.choice(queues) if queues else None

    def ever_offered(self, tool: str) -> bool:
        return bool(self.r.hexists(self.keys.tools_offered, tool))

    def wait(self, run_id: str, call_id: str, resend_every: float, ttl: float,
             now: float | None = None) -> tuple[float, bool]:
        """The call waits for its tool: (seconds it has waited, whether this message should
        send the next look). One message per ``resend_every`` goes on looking, so the
        watchdog's resends of the same call do not multiply the looks."""
        now = time.time() if now is None else now
        key = self.keys.run_toolwait(run_id)
        raw = self.r.hget(key, call_id)
        rec = json.loads(raw) if raw else {"since": now, "last": 0.0}
        looks = now - float(rec["last"]) >= resend_every * 0.8
        if looks or not raw:
            rec["last"] = now if looks else rec["last"]
            pipe = self.r.pipeline(transaction=False)
            pipe.hset(key, call_id, json.dumps(rec))
            pipe.expire(key, int(ttl))
            pipe.execute()
        return now - float(rec["since"]), looks

    def done_waiting(self, run_id: str, call_id: str) -> None:
        self.r.hdel(self.keys.run_toolwait(run_id), call_id)
