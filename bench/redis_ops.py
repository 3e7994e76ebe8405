"""Redis commands per turn, counted by the server (``INFO commandstats``): a cost figure that
a loaded machine cannot blur (P1's milliseconds can move 2× between two runs here).

    python -m bench.redis_ops            # one JSON line

Runs like P1's (one ``echo`` call per turn, ``completion_check`` off) of 12 and of 2 turns,
one at a time, on 2 worker processes; the figure is (commands of the 12-turn runs − of the
2-turn runs) / 10 / runs, per command name, plus the Lua scripts' own ``redis.call``s as the
server counts them (they appear under their command names too). Taken with the workers
idle otherwise, so the watchdogs' passes (one ``EVALSHA`` per worker every 0.5 s) are
measured separately as ``idle_per_s``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from bench.cluster import Cluster, WorkerSpec
from bench.script import Scenario

RUNS = 5


def _stats(r: redis.Redis) -> dict[str, int]:
    info = r.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in info.items()}


def _delta(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b) if b.get(k, 0) != a.get(k, 0)}


def _runs(c: Cluster, turns: int) -> dict[str, int]:
    from reactq.dispatcher.client import Dispatcher
    from reactq.shared.requests import RunRequest

    d = Dispatcher(c.settings())
    r = c.redis()
    before = _stats(r)
    for _ in range(RUNS):
        h = d.submit(RunRequest(query=Scenario(turns=turns, calls=1, tool="echo").query(),
                                completion_check=False))
        h.result(timeout=120)
    time.sleep(0.2)
    return _delta(before, _stats(r))


def run() -> dict[str, Any]:
    with Cluster() as c:
        c.start_workers(WorkerSpec(count=2, pool="threads", concurrency=4))
        r = c.redis()
        idle0, t0 = _stats(r), time.monotonic()
        time.sleep(5)
        idle = _delta(idle0, _stats(r))
        idle_s = time.monotonic() - t0
        long, short = _runs(c, 12), _runs(c, 2)
        per_turn = {k: round((long.get(k, 0) - short.get(k, 0)) / 10 / RUNS, 2)
                    for k in set(long) | set(short)}
        per_turn = {k: v for k, v in sorted(per_turn.items()) if abs(v) >= 0.05}
        writes = ("hset", "hdel", "xadd", "zadd", "zrem", "sadd", "set", "del", "expire",
                  "pexpire", "rpush", "lpush", "hincrby", "incr")
        return {"per_turn": per_turn,
                "per_turn_total": round(sum(per_turn.values()), 1),
                "per_turn_writes": round(sum(v for k, v in per_turn.items() if k in writes), 1),
                "idle_per_s": {k: round(v / idle_s, 2) for k, v in sorted(idle.items())}}


if __name__ == "__main__":
    print(json.dumps(run()))
