"""The gateway's admission per turn of the event loop (``dispatcher/http/pacing.py``): a
burst enters a few per turn, in arrival order, and the liveness probe is never held."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from reactq.dispatcher.http.pacing import Paced, Pacer, loop_pacer


class Turns:
    """Counts turns of the loop (a callback that reschedules itself once per turn)."""

    def __init__(self) -> None:
        self.n = 0
        self.loop = asyncio.get_running_loop()
        self.loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.n += 1
        self.loop.call_soon(self._tick)


def test_a_burst_is_admitted_a_few_per_turn_in_arrival_order() -> None:
    async def main() -> tuple[list[int], Counter[int]]:
        turns = Turns()
        pacer = Pacer(per_turn=4)
        order: list[int] = []
        per_turn: Counter[int] = Counter()

        async def request(i: int) -> None:
            await pacer.admit()
            order.append(i)
            per_turn[turns.n] += 1

        await asyncio.gather(*(request(i) for i in range(30)))
        return order, per_turn

    order, per_turn = asyncio.run(main())
    assert order == list(range(30))
    assert max(per_turn.values()) <= 4 and len(per_turn) >= 30 // 4


def test_a_request_whose_client_left_while_waiting_gives_its_place_to_the_next() -> None:
    async def main() -> list[int]:
        pacer = Pacer(per_turn=1)
        order: list[int] = []

        async def request(i: int) -> None:
            await pacer.admit()
            order.append(i)

        tasks = [asyncio.create_task(request(i)) for i in range(4)]
        await asyncio.sleep(0)  # 0 is in; 1, 2, 3 wait
        tasks[1].cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return order

    assert asyncio.run(main()) == [0, 2, 3]


def test_the_liveness_probe_is_never_held() -> None:
    async def main() -> list[str]:
        seen: list[str] = []

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            seen.append(scope["path"])

        paced = Paced(app)
        pacer = loop_pacer()
        pacer.admitted = pacer.per_turn  # this turn is full: others wait for the next
        burst = [asyncio.create_task(paced({"type": "http", "path": "/v1/runs/x/events"}, None, None))
                 for _ in range(3)]
        await paced({"type": "http", "path": "/healthz"}, None, None)
        assert seen == ["/healthz"]  # answered before any of the burst got in
        await asyncio.gather(*burst)
        return seen

    assert asyncio.run(main()) == ["/healthz"] + ["/v1/runs/x/events"] * 3
