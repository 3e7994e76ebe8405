"""Hooks: the deterministic enforcement layer around every tool call.

* ``base``: the hook types and the registry (what a hook author uses),
* ``builtins``: the built-in hooks (``read_only_mode``, ``deny_tools``, ``rate_limiter``,
  ``connector_call_logger``, …),
* ``loader``: ``REACTQ_HOOKS`` (``module:attr`` entries) plus the built-ins.
"""

from reactq.shared.hooks.base import Handler, Hook, HookContext, HookPoint, HookRegistry, HookResult

__all__ = ["Handler", "Hook", "HookContext", "HookPoint", "HookRegistry", "HookResult"]
