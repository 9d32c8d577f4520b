"""`boundary mcp --server URL [--token T]`: the MCP server over stdio, for a local assistant.

It speaks to a running Boundary server over its HTTP API, with the user's submission
token as the bearer (from --token, else BOUNDARY_SUBMIT_TOKEN), so it can do nothing the
user could not do with `curl`. stdout carries the protocol; logs go to stderr.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import anyio
import httpx
from mcp.server.mcpserver import Context

from app.mcp.api import BoundaryApi, Connect
from app.mcp.tools import build_server

EXAMPLE = "http://127.0.0.1:8000"
API_TIMEOUT_S = 30.0
"""One API request's limit (a tool's own wait is made of many short requests)."""


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="boundary mcp",
        description="Serve Boundary's tools to a coding assistant over MCP (stdio), "
        "through a running server's HTTP API.",
    )
    parser.add_argument("--server", required=True, metavar="URL", help=f"e.g. {EXAMPLE}")
    parser.add_argument(
        "--token",
        default=None,
        help="the server's submission token, when it needs one (default: $BOUNDARY_SUBMIT_TOKEN)",
    )
    args = parser.parse_args(argv)
    url = urlsplit(args.server)
    if url.scheme not in ("http", "https") or not url.netloc:
        given = args.server[:80]
        parser.error(f"--server: give the server's address, e.g. {EXAMPLE} (not {given!r})")
    return args


def remote(server: str, token: str | None) -> Connect:
    """How tools reach the server at `server`: a client per call, carrying `token`."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    @asynccontextmanager
    async def connect(_: Context | None) -> AsyncIterator[BoundaryApi]:
        async with httpx.AsyncClient(
            base_url=server, headers=headers, timeout=API_TIMEOUT_S
        ) as client:
            yield BoundaryApi(client, server)

    return connect


def mcp_command(argv: list[str]) -> int:
    args = _arguments(argv)
    token = args.token or os.environ.get("BOUNDARY_SUBMIT_TOKEN") or None
    server = build_server(remote(args.server.rstrip("/"), token))
    anyio.run(server.run_stdio_async)
    return 0
