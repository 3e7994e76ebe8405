"""reactq as an MCP server: the tool ``reactq_run`` and MCP tasks over reactq runs.

``server.build_server`` makes the server (the official ``mcp`` package's ``MCPServer``);
``reactq mcp`` serves it on stdio, the gateway at ``/mcp`` (streamable HTTP, bearer keys).
``tasks.RunTasks`` is the tasks extension: a task is a run.
"""
