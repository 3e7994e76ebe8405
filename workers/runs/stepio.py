"""The I/O a step of the Celery shell does between its load and its commit (``StepIO``):
live events, and the read after an LLM call. See ``workers/runs/drive.py`` for the round trips
of a step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reactq.shared.engine.state import Interrupt
from reactq.shared.events import Event
from reactq.shared.stores.roundtrip import take

if TYPE_CHECKING:
    from reactq.workers.runtime import Runtime


class StoreIO:
    """StepIO over the run store, for one task. ``cancel`` is the latest cancel flag the task
    read (first its load's, then each read after an LLM call)."""

    def __init__(self, rt: Runtime, run_id: str, cancel: bool = False) -> None:
        self.rt = rt
        self.run_id = run_id
        self.cancel = cancel
        self.published = 0
        """The last seq this task sent ahead (with a commit): not sent again."""

    async def publish(self, events: list[Event]) -> None:
        # A round trip of its own: live events (thinking start, answer deltas) reach watchers
        # before the call they announce, or as the answer streams, not with the next commit.
        events = [e for e in events if e.seq > self.published]
        if events:
            self.rt.store.publish(self.run_id, events)

    async def interrupts(self, after: str | None) -> list[Interrupt]:
        # After an LLM call (a turn, the synthesis) the user may have written meanwhile: a
        # round trip of its own, with the cancel flag and the step's deferred writes along.
        got, self.cancel = self.rt.store.after_llm(self.run_id, after, then=take())
        return got


class LoadedIO:
    """StepIO for the fan-in, the task's first step, which reads interrupts before anything
    slow: the load's interrupts serve (read in the lease's round trip)."""

    def __init__(self, io: StoreIO, loaded: list[Interrupt]) -> None:
        self.io = io
        self.loaded = loaded

    async def publish(self, events: list[Event]) -> None:
        await self.io.publish(events)

    async def interrupts(self, after: str | None) -> list[Interrupt]:
        # A run committed before the load knew its cursor field read them all: keep the new.
        return [i for i in self.loaded if _stream_id(i.cursor) > _stream_id(after or "0-0")]


def _stream_id(entry_id: str) -> tuple[int, ...]:
    return tuple(int(p) for p in entry_id.split("-"))
