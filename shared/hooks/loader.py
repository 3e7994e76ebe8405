"""Loading hooks from ``REACTQ_HOOKS`` and building a worker's hook registry.

``REACTQ_HOOKS`` is a comma-separated list of ``module:attr`` entries, like
``REACTQ_TOOLS`` (see :mod:`reactq.shared.tools.loader`). Each ``attr`` may be

* a :class:`~reactq.shared.hooks.Hook`,
* a list or tuple of ``Hook``\\ s,
* a :class:`~reactq.shared.hooks.HookRegistry`, or
* a zero-argument callable returning one of those (called once, at load time;
  e.g. ``reactq.shared.hooks.builtins:read_only_mode``).

Every problem is a :class:`~reactq.shared.errors.ConfigError` naming the entry and the reason.
Hooks are loaded in the worker: the gateway never imports them.

:func:`default_hooks` is what workers use: fresh instances of the built-in hooks
(``result_truncator``, ``rate_limiter`` as ``REACTQ_CONNECTOR_RATE_LIMIT`` /
``REACTQ_CONNECTOR_RATE_WINDOW_S`` set it, or none when the limit is 0,
``connector_call_logger``; see :mod:`reactq.shared.hooks.builtins`) followed by the loaded hooks. Pass ``builtins=False`` to
leave the built-ins out.
"""

from __future__ import annotations

from collections.abc import Iterable

from reactq.shared.hooks.builtins import builtin_hooks
from reactq.shared.hooks.guardrails import guardrail_hooks
from reactq.shared.hooks.base import Hook, HookRegistry
from reactq.shared.plugins import load_entries
from reactq.shared.settings import Settings

__all__ = ["default_hooks", "load_hooks"]


def load_hooks(
    spec: str | Iterable[str] | None, *, setting: str = "REACTQ_HOOKS"
) -> HookRegistry:
    """A registry of the hooks named by ``spec``, registered in spec order."""
    registry = HookRegistry()
    for _entry, hooks in load_entries(
        spec, setting=setting, item_type=Hook, container_types=(HookRegistry,)
    ):
        for hook in hooks:
            registry.register(hook)
    return registry


def default_hooks(settings: Settings, *, builtins: bool = True) -> HookRegistry:
    """The built-ins (unless ``builtins=False``), the guardrails the settings switch on
    (``REACTQ_GUARDRAIL_*``), then ``load_hooks(settings.hooks)``."""
    registry = HookRegistry(builtin_hooks(rate_limit=settings.connector_rate_limit,
                                          rate_window_s=settings.connector_rate_window_s)
                            if builtins else ())
    for hook in [*guardrail_hooks(settings), *load_hooks(settings.hooks)]:
        registry.register(hook)
    return registry
