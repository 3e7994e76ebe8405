"""What a step is given, and the one recipe for a run's live dependencies.

``StepIO`` is the shell's side of a step (live publishing, reading interrupts); ``Approver``
the in-process shell's decider for calls that wait for a person.

``EngineDeps`` carries the LLM client, the tool registry, the hooks, the engine
configuration and the context guard. The Celery shell, the CLI's local run and any caller of
``run_local`` build it the same way, here: the run's model by registry name (the default when
unnamed or unknown), the registry's ``fast`` role for selection and compaction (the run's own
model when no model has that role).

A set is built once per model name and reused: ``EngineDeps`` caches the tool schemas of each
tool set, and the context guard remembers the histories it has measured, so rebuilding them
for every step would throw that work away.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from reactq.shared.engine.context import ContextGuard
from reactq.shared.engine.result import run_tool_names
from reactq.shared.engine.state import Interrupt, RunState
from reactq.shared.events import Event
from reactq.shared.hooks import HookRegistry
from reactq.shared.llm.base import LLM
from reactq.shared.settings import EngineConfig
from reactq.shared.tools.base import ToolRegistry

#: Given the approval record, returns ``{decision, args?, message?, by?}``.
Approver = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass
class EngineDeps:
    """The live objects a step needs. Built once per process; never serialized."""

    llm: LLM
    registry: ToolRegistry
    hooks: HookRegistry = field(default_factory=HookRegistry)
    config: EngineConfig = field(default_factory=EngineConfig.defaults)
    """Passed in by the shell (read from the environment at its edge); the values by default."""
    guard: ContextGuard | None = None
    selection_llm: LLM | None = None
    clock: Callable[[], float] = time.time
    approver: Approver | None = None
    """The in-process shell's decider for calls that wait for a person (``engine/waiting.py``)."""
    approval_timeout_s: int = 86_400
    """The operator's approval timeout (``REACTQ_APPROVAL_TIMEOUT_S``): the approvals a tool,
    an MCP server or a hook demands wait this long (``approval.terms``)."""
    _tool_sets: dict[tuple[tuple[str, ...], int], tuple[ToolRegistry, list[dict[str, Any]]]] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    """Filtered registries and their schemas by (names, size of ``registry``): every turn
    needs them, and a registry only ever grows (a tool name is never registered twice)."""

    def _tool_set(self, state: RunState) -> tuple[ToolRegistry, list[dict[str, Any]]]:
        key = (tuple(run_tool_names(state)), len(self.registry))
        found = self._tool_sets.get(key)
        if found is None:
            reg = self.registry.filtered(key[0])
            found = self._tool_sets[key] = (reg, [t.openai_schema() for t in reg])
        return found

    def run_registry(self, state: RunState) -> ToolRegistry:
        """The run's effective tools: the allowlist, narrowed by selection."""
        return self._tool_set(state)[0]

    def schemas(self, state: RunState) -> list[dict[str, Any]]:
        return list(self._tool_set(state)[1])


class StepIO(Protocol):
    """The shell's side of a step: live publishing and reading interrupts."""

    async def publish(self, events: list[Event]) -> None: ...

    async def interrupts(self, after: str | None) -> list[Interrupt]: ...


class Models(Protocol):
    """What the recipe reads of a model registry (``ModelRegistry`` fits)."""

    def __contains__(self, name: object) -> bool: ...
    def get(self, name: str) -> LLM: ...
    def get_default(self) -> LLM: ...
    def get_by_role(self, role: str) -> LLM: ...


def model_for(models: Models, name: str | None) -> LLM:
    """The model by registry name, else the registry's default."""
    if name and name in models:
        return models.get(name)
    return models.get_default()


def fast_for(models: Models, llm: LLM) -> LLM:
    """The registry's ``fast`` model, else ``llm`` itself."""
    try:
        return models.get_by_role("fast")
    except KeyError:
        return llm


def build_deps(models: Models, tools: ToolRegistry, hooks: HookRegistry,
               config: EngineConfig, model: str | None = None) -> EngineDeps:
    """A run's dependencies for ``model`` (a registry name, or ``None`` for the default)."""
    llm = model_for(models, model)
    fast = fast_for(models, llm)
    guard = ContextGuard(config.context_budget, llm=fast, max_message_chars=config.max_message_chars,
                         keep_recent=config.keep_recent)
    return EngineDeps(llm=llm, registry=tools, hooks=hooks, config=config, guard=guard,
                      selection_llm=fast)


class DepsCache:
    """``build_deps`` once per model name, for one model registry (whose LLM clients may be
    bound to one thread's event loop: keep one cache per registry)."""

    def __init__(self, models: Models, tools: ToolRegistry, hooks: HookRegistry,
                 config: EngineConfig) -> None:
        self.models = models
        self.tools = tools
        self.hooks = hooks
        self.config = config
        self._built: dict[str | None, EngineDeps] = {}
        self._lock = threading.Lock()

    def get(self, model: str | None = None) -> EngineDeps:
        key = model if model and model in self.models else None
        found = self._built.get(key)
        if found is None:
            with self._lock:
                found = self._built.get(key)
                if found is None:
                    found = self._built[key] = build_deps(self.models, self.tools, self.hooks,
                                                          self.config, key)
        return found
