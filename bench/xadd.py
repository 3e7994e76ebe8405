"""The P5 floor's publisher: ``python -m bench.xadd URL KEY N INTERVAL``.

XADDs ``N`` entries to ``KEY``, each carrying the wall-clock time just before its XADD
(field ``t``), ``INTERVAL`` seconds apart; the bench process reads them with a blocking
XREAD in another process and computes the delivery time.
"""

from __future__ import annotations

import sys
import time

import redis


def main() -> None:
    url, key, n, interval = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    r = redis.Redis.from_url(url)
    r.ping()
    time.sleep(0.2)  # let the reader block first
    for _ in range(n):
        r.xadd(key, {"t": f"{time.time():.6f}"})
        time.sleep(interval)


if __name__ == "__main__":
    main()
