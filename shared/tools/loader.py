"""Loading tools from ``REACTQ_TOOLS`` and building a worker's tool registry.

``REACTQ_TOOLS`` is a comma-separated list of ``module:attr`` entries, for example
``REACTQ_TOOLS="myapp.tools:TOOLS, myapp.search:make_search_tool"``. Each ``attr`` may be

* a :class:`~reactq.shared.tools.base.Tool` (e.g. a function decorated with ``@tool``),
* a list or tuple of ``Tool``\\ s,
* a :class:`~reactq.shared.tools.base.ToolRegistry`, or
* a zero-argument callable returning one of those (called once, at load time).

Every problem (bad entry, import failure, wrong type, a factory that raises, two tools
with one name) is a :class:`~reactq.shared.errors.ConfigError` naming the entry and the reason,
raised at worker start rather than in the middle of a run.

:func:`default_registry` is what workers and ``reactq run --local`` use: the built-in
tools (:mod:`reactq.shared.tools.builtins`; the demo tools ``echo``, ``add``, ``sleep`` only
with ``REACTQ_DEMO_TOOLS=true``) followed by the loaded ones, with the call deadline
``REACTQ_TOOL_TIMEOUT``. A loaded tool with the
name of a built-in **replaces** that built-in (a warning is logged), so a deployment can
supply its own ``calculator``; two loaded tools with one name are an error.

Hooks are loaded the same way by :mod:`reactq.shared.hooks.loader` (``REACTQ_HOOKS``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from reactq.shared.errors import ConfigError
from reactq.shared.plugins import entry_error, load_entries
from reactq.shared.settings import Settings
from reactq.shared.tools.base import Tool, ToolRegistry
from reactq.shared.tools.builtins import BUILTIN_TOOLS, DEMO_TOOLS
from reactq.shared.tools.http_fetch import http_fetch_tool
from reactq.shared.tools.isolation import SPEC_KEY

__all__ = ["default_registry", "load_tools"]

log = logging.getLogger(__name__)


def load_tools(spec: str | Iterable[str] | None, *, setting: str = "REACTQ_TOOLS") -> list[Tool]:
    """The tools named by ``spec`` (``"module:attr, module:attr"``), in spec order.

    ``setting`` names the configuration source in error messages.
    """
    tools: list[Tool] = []
    origin: dict[str, str] = {}
    for entry, items in load_entries(
        spec, setting=setting, item_type=Tool, container_types=(ToolRegistry,)
    ):
        for t in items:
            if t.name in origin:
                where = "the same entry" if origin[t.name] == entry else f"entry '{origin[t.name]}'"
                raise entry_error(
                    setting, entry, f"tool '{t.name}' is already provided by {where}"
                )
            origin[t.name] = entry
            # A tool-runner process rebuilds the tool from its entry when it cannot import
            # the function by name (a factory's closure).
            t.metadata.setdefault(SPEC_KEY, entry)
            tools.append(t)
    return tools


def default_registry(settings: Settings) -> ToolRegistry:
    """Built-in tools (with ``http_fetch`` configured from ``settings``), the tools of the
    ``REACTQ_MCP`` servers, then ``load_tools(settings.tools)``; loaded tools override
    built-ins, and an MCP tool never shadows another (its name has the ``NAME__`` prefix)."""
    loaded = load_tools(settings.tools)
    loaded_names = {t.name for t in loaded}
    builtins = [builtin_http_fetch(settings) if t.name == "http_fetch" else t
                for t in BUILTIN_TOOLS + (DEMO_TOOLS if settings.demo_tools else [])]
    for name in loaded_names & {t.name for t in builtins}:
        log.warning("REACTQ_TOOLS replaces the built-in tool '%s'", name)
    remote = [t for t in _mcp_tools(settings) if t.name not in loaded_names]
    return ToolRegistry(
        [t for t in builtins if t.name not in loaded_names] + remote + loaded,
        default_timeout=settings.tool_timeout,
    )


def _mcp_tools(settings: Settings) -> list[Tool]:
    """The ``REACTQ_MCP`` servers' tools. The MCP SDK is imported only when a file is set: it
    costs every process that loads tools (workers, tool runners, the gateway) a second."""
    if settings.mcp is None or str(settings.mcp) == "":
        return []
    from reactq.shared.tools.mcp import load_mcp_config, mcp_tools

    return list(mcp_tools(load_mcp_config(settings.mcp)))


def builtin_http_fetch(settings: Settings) -> Tool:
    try:
        return http_fetch_tool(allow=settings.http_fetch_allow,
                               max_bytes=settings.http_fetch_max_bytes,
                               timeout=settings.http_fetch_timeout)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
