"""The MCP SDK's own client of an app's /mcp endpoint, in-process, for the tests that
drive the tools as an assistant would."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


@asynccontextmanager
async def mcp_client(
    app: Any, token: str | None = None, address: str = "127.0.0.1"
) -> AsyncIterator[Client]:
    """The SDK's client of `app`'s /mcp, in-process, with `token` as its bearer, its
    requests coming from `address`."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = httpx2.ASGITransport(app=app, client=(address, 40000))
    http = httpx2.AsyncClient(transport=transport, base_url="http://testserver", headers=headers)
    async with http, Client(streamable_http_client("http://testserver/mcp", http_client=http)) as c:
        yield c


async def tool_text(client: Client, tool: str, arguments: dict[str, Any]) -> tuple[bool, str]:
    """Whether the call was refused, and its text (a refusal never holds a traceback)."""
    result = await client.call_tool(tool, arguments)
    text: str = result.content[0].text  # type: ignore[union-attr]
    assert "Traceback" not in text
    return result.is_error, text
