"""What the protocol doors share: the OpenAI Responses API (``reactq.dispatcher.http.responses``)
and the MCP server (``reactq.dispatcher.mcp``).

``door.create_run`` is the one place either protocol makes a run; ``runview`` reads a run
back (status, events, approvals) for both, asynchronously.
"""
