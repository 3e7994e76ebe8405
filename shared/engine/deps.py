"""The one recipe for a run's live dependencies, and the cache that builds each set once.

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
from typing import Protocol

from reactq.shared.engine.context import ContextGuard
from reactq.shared.engine.steps import EngineDeps
from reactq.shared.hooks import HookRegistry
from reactq.shared.llm.base import LLM
from reactq.shared.settings import EngineConfig
from reactq.shared.tools.base import ToolRegistry


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
