"""Stream assembly: a streamed reply's tool-call fragments, put back together."""

from __future__ import annotations

from dataclasses import dataclass, field

from reactq.shared.llm.messages import parse_arguments
from reactq.shared.models import ToolCallRequest


@dataclass
class _Slot:
    index: int
    order: int
    id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)


class ToolCallAssembler:
    """Assembles streamed tool-call fragments into ``ToolCallRequest``s.

    Fragments are grouped by ``index``. ``id`` and ``name`` are taken once per call (llama.cpp
    repeats them in every chunk; concatenating would give ``call_1call_1``). A *different* id
    or name on an index already in use starts a new call there (providers that put every
    call on index 0); later argument-only fragments go to that newest call. Output is sorted
    by index, then arrival; calls without an id get ``call_<n>``.
    """

    def __init__(self) -> None:
        self._slots: list[_Slot] = []
        self._current: dict[int, _Slot] = {}

    def add(self, index: int | None, id: str | None, name: str | None, arguments: str | None) -> None:
        """Feed one fragment (as found in ``delta.tool_calls[i]``)."""
        idx = index if index is not None else 0
        slot = self._current.get(idx)
        starts_new = slot is None or (
            (bool(id) and bool(slot.id) and id != slot.id)
            or (bool(name) and bool(slot.name) and name != slot.name)
        )
        if starts_new:
            slot = _Slot(index=idx, order=len(self._slots))
            self._slots.append(slot)
            self._current[idx] = slot
        assert slot is not None
        if id and not slot.id:
            slot.id = id
        if name and not slot.name:
            slot.name = name
        if arguments:
            slot.parts.append(arguments)

    def result(self) -> list[ToolCallRequest]:
        """The assembled calls (empty list when none were streamed)."""
        ordered = sorted(self._slots, key=lambda s: (s.index, s.order))
        return [
            ToolCallRequest(id=s.id or f"call_{n}", name=s.name,
                            arguments=parse_arguments("".join(s.parts)))
            for n, s in enumerate(ordered)
        ]
