"""The in-process shell: a whole run in one asyncio process.

Tools of one turn run concurrently with ``asyncio.gather``. It is what unit tests use and
what ``reactq run --local`` runs. Same engine, same event sequence as the Celery shell.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import uuid
from dataclasses import replace
from collections.abc import Coroutine
from typing import Any, assert_never

from reactq.shared.engine import ending, loop, steps
from reactq.shared.engine.next import (
    Advance, Answer, CallLLM, Done, RunTools, SelectTools, advanced, next_step,
)
from reactq.shared.engine.recorded import Recorded
from reactq.shared.engine.state import Interrupt, RunState
from reactq.shared.engine.deps import Approver, EngineDeps, StepIO
from reactq.shared.errors import StateConflict
from reactq.shared.events import Event, EventSink, ListSink
from reactq.shared.llm.base import ability
from reactq.shared.requests import RunRequest


class InterruptQueue:
    """Follow-up messages for one run: ids of 12 hex chars, FIFO, recallable."""

    def __init__(self) -> None:
        self._items: list[Interrupt] = []
        self._counter = itertools.count(1)

    def put(self, content: str) -> str:
        msg_id = secrets.token_hex(6)
        self._items.append(Interrupt(id=msg_id, content=content, cursor=f"{next(self._counter):012d}"))
        return msg_id

    def recall(self, msg_id: str) -> bool:
        before = len(self._items)
        self._items = [i for i in self._items if i.id != msg_id]
        return len(self._items) < before

    def after(self, cursor: str | None) -> list[Interrupt]:
        # Cursors are zero-padded, so string order is numeric order.
        return [i for i in self._items if cursor is None or i.cursor > cursor]


class _IO:
    def __init__(self, sink: EventSink, queue: InterruptQueue | None) -> None:
        self.sink = sink
        self.queue = queue

    async def publish(self, events: list[Event]) -> None:
        if events:
            await self.sink.emit(events)

    async def interrupts(self, after: str | None) -> list[Interrupt]:
        return self.queue.after(after) if self.queue else []


def new_state(request: RunRequest, deps: EngineDeps, *, run_id: str | None = None) -> RunState:
    """A fresh run for ``request`` (mode resolved from the model's abilities)."""
    native = request.mode != "json" and ability(deps.llm, "tool_call")
    available = request.tools if request.tools is not None else deps.registry.names()
    state = loop.new_run(
        run_id=run_id or uuid.uuid4().hex, query=request.query,
        model=request.model or deps.llm.name, native=native, available_tools=available,
        max_iterations=request.max_iterations or deps.config.max_iterations, completion_check=request.completion_check,
        system_prompt=request.system_prompt, metadata=request.metadata, now=deps.clock(),
    )
    state.priority = request.priority
    state.token_budget = request.token_budget
    state.cost_budget_usd = request.cost_budget_usd
    state.output_schema = request.output_schema
    if request.approval is not None:
        state.approval = request.approval.model_dump(mode="json")
    state.webhook_on_done = request.webhook is not None and request.webhook.wants("done")
    return state


async def take_step(state: RunState, deps: EngineDeps, io: StepIO) -> Advance:
    """Carry out what the state needs next; an error ends the run as ``failed``."""
    nxt = next_step(state)
    step: Coroutine[Any, Any, Advance]
    match nxt:
        case SelectTools():
            step = steps.select_step(state, deps, io)
        case CallLLM():
            step = steps.llm_step(state, deps, io)
        case RunTools():
            step = steps.tools_step(state, deps, io)
        case Answer():
            step = steps.answer_step(state, deps, io)
        case Done():
            raise StateConflict(f"run {state.run_id} has ended: it has no step to take")
        case _:
            assert_never(nxt)
    try:
        return await step
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return advanced(state, ending.fail(state, exc, now=deps.clock()))


async def advance(state: RunState, deps: EngineDeps, io: StepIO) -> list[Event]:
    """``take_step``'s events (for a caller that publishes them and reads the state itself)."""
    return (await take_step(state, deps, io)).events


async def run_local(
    request: RunRequest | str,
    deps: EngineDeps,
    *,
    sink: EventSink | None = None,
    interrupts: InterruptQueue | None = None,
    cancel: asyncio.Event | None = None,
    run_id: str | None = None,
    approver: Approver | None = None,
    recorded: Recorded | None = None,
    state: RunState | None = None,
) -> RunState:
    """Run to the end in this process; returns the final state (``status`` is terminal).
    ``approver`` decides calls that wait for a person (``reactq.shared.engine.waiting``);
    ``recorded``: another run's recorded calls, which may answer this run's calls
    (``reactq.shared.engine.recorded``). ``state``: a run prepared already (a fork's: its
    parent's history), instead of the one ``request`` makes."""
    req = RunRequest(query=request) if isinstance(request, str) else request
    if approver is not None:
        deps = replace(deps, approver=approver)
    if state is None:
        state = new_state(req, deps, run_id=run_id)
    if recorded is not None:
        state.recorded = recorded.model_dump(mode="json")
    io = _IO(sink or ListSink(), interrupts)
    nxt = next_step(state)
    while not isinstance(nxt, Done):
        if cancel is not None and cancel.is_set():
            await io.publish(ending.cancel(state, now=deps.clock()))
            break
        step = await take_step(state, deps, io)
        await io.publish(step.events)
        nxt = step.next
    return state
