"""`boundary mcp --server URL [--token T]`: the MCP server over stdio, for a local assistant.

It speaks to a running Boundary server (at its URL, or over its unix socket, `unix:PATH`:
`workers.export.server_address`) over its HTTP API, with the user's submission
token as the bearer (from --token, else BOUNDARY_SUBMIT_TOKEN), so it can do nothing the
user could not do with `curl`. stdout carries the protocol; logs go to stderr.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from mcp.server.mcpserver import Context

from app.mcp.api import BoundaryApi, Connect
from app.mcp.tools import build_server
from workers.catalog import ServerAddress, server_option

API_TIMEOUT_S = 30.0
"""One API request's limit (a tool's own wait is made of many short requests)."""


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="boundary mcp",
        description="Serve Boundary's tools to a coding assistant over MCP (stdio), "
        "through a running server's HTTP API.",
    )
    parser.add_argument(
        "--server",
        required=True,
        type=server_option,
        metavar="URL",
        help="e.g. http://127.0.0.1:8000 or unix:/run/boundary.sock",
    )
    parser.add_argument(
        "--token",
        default=None,
        help="the server's submission token, when it needs one (default: $BOUNDARY_SUBMIT_TOKEN)",
    )
    return parser.parse_args(argv)


def remote(server: ServerAddress, token: str | None) -> Connect:
    """How tools reach `server`: a client per call, carrying `token`; the addresses the
    tools give are the server's (`ServerAddress.link`)."""

    @asynccontextmanager
    async def connect(_: Context | None) -> AsyncIterator[BoundaryApi]:
        async with server.async_client(token, timeout=API_TIMEOUT_S) as client:
            yield BoundaryApi(client, server.public_base)

    return connect


def mcp_command(argv: list[str]) -> int:
    args = _arguments(argv)
    token = args.token or os.environ.get("BOUNDARY_SUBMIT_TOKEN") or None
    server = build_server(remote(args.server, token))
    anyio.run(server.run_stdio_async)
    return 0
