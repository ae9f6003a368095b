"""``memharness mcp``: the memory of one tenant as MCP tools, over stdio or streamable HTTP.

``tools`` is what each tool does with a :class:`~memharness.MemoryClient` (and its answers as
pydantic models), ``server`` the MCP server around them (schemas, descriptions, the mapping
of typed errors to tool errors), ``cli`` the command. Importing this package imports none of
them: the MCP SDK loads only when the command runs.
"""
