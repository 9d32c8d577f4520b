"""Boundary for coding assistants: an MCP server whose tools go through the HTTP API.

One server (tools, cards as resources, bounded answers) for two transports: stdio
(`boundary mcp`, app.mcp.stdio) and streamable HTTP at /mcp (app.mcp.mount).
"""
