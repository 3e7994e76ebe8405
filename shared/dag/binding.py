"""Which registry model does which DAG job, by registry *name*.

Child runs name their model in ``RunRequest.model`` (a registry name), so the DAG resolves
roles to names, not to LLM objects: ``smart`` plans, analyzes and synthesizes; a step's
``model_hint`` (``fast`` / ``reasoning``, None = ``general``) picks its model; a role no
model has falls back to the registry's default, as ``ModelRegistry.resolve`` does.
"""

from __future__ import annotations

from reactq.shared.errors import ConfigError
from reactq.shared.llm.registry import ModelRegistry

__all__ = ["default_name", "name_for_role"]


def name_for_role(registry: ModelRegistry, role: str | None) -> str:
    """The first model registered with ``role`` (None = ``general``), else the default."""
    wanted = role or "general"
    for name in registry.list_models():
        if wanted in registry.roles_of(name):
            return name
    return default_name(registry)


def default_name(registry: ModelRegistry) -> str:
    """``get_default()``'s name: the first ``general`` model, else the first registered."""
    names = registry.list_models()
    if not names:
        raise ConfigError("Model registry is empty: add a [models.NAME] entry to REACTQ_MODELS or set REACTQ_MODEL")
    for name in names:
        if "general" in registry.roles_of(name):
            return name
    return names[0]
