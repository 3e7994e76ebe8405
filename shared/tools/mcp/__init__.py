"""Tools from MCP (Model Context Protocol) servers configured in ``REACTQ_MCP``.

See :mod:`.config` (the TOML file), :mod:`.hub` (one session per server per process) and
:mod:`.tools` (``NAME__tool`` tools, annotations → ``idempotent``, result summaries).
"""

from reactq.shared.tools.mcp.config import McpServerConfig, load_mcp_config
from reactq.shared.tools.mcp.hub import McpHub, McpUnavailable, close_hub, get_hub
from reactq.shared.tools.mcp.tools import McpTool, idempotent_from, mcp_tools, summarise_result

__all__ = [
    "McpHub", "McpServerConfig", "McpTool", "McpUnavailable", "close_hub", "get_hub",
    "idempotent_from", "load_mcp_config", "mcp_tools", "summarise_result",
]
