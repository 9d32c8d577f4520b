"""The server's /mcp endpoint (streamable HTTP), on when BOUNDARY_MCP=1.

`McpMount` sits inside the app's outer layer and answers /mcp; everything else passes
on. Its tools reach the API through an in-process httpx client of the whole app (the
outer layer included, so the reader's pages are there too), carrying the caller's own
Authorization and X-Forwarded-For headers and peer address: admission sees the same
client, token and rate it would see on /api/v1, and refuses the same way.

The SDK's session manager runs in stateless mode, one per request: stateless mode keeps
nothing between requests, and a manager started per request needs no lifespan, which an
app's lifespan would otherwise have to run exactly once (`run()` may not be entered
twice, while this app's lifespan may run again, and in-process clients never run it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

import httpx
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.mcp.api import BoundaryApi
from app.mcp.tools import build_server
from app.settings import Settings
from app.web.clients import UNIX_PEER

MCP_PATHS = ("/mcp", "/mcp/")
FORWARDED = ("authorization", "x-forwarded-for")
"""The caller's headers the in-process API request carries: its token, and (trusted only
from a trusted proxy, as on /api/v1: app.web.clients) the client a proxy names."""
LOOPBACK_TIMEOUT_S = 60.0

_CALLER: ContextVar[Scope | None] = ContextVar("mcp_caller", default=None)
"""The /mcp request being served, for what the SDK gives no Context: a resource read
(the SDK's tasks for a request start inside it, so they see it)."""


class McpMount:
    """/mcp for `app`'s callers; every other request goes to `app`. `loop_back` (set once
    the outer app exists) is what the tools' API requests are served by."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        self.loop_back: ASGIApp | None = None
        self.server: MCPServer = build_server(self._connect)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in MCP_PATHS:
            await self.app(scope, receive, send)
            return
        # No await between making the manager and reading it: no other request's
        # manager can take its place on the server in between.
        self.server.streamable_http_app(
            streamable_http_path=scope["path"],
            stateless_http=True,
            json_response=True,
            max_request_body_size=self.settings.MAX_BODY_BYTES,
            # The same hosts as /api/v1: the submission token is what guards work.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        manager = self.server.session_manager
        caller = _CALLER.set(scope)
        try:
            async with manager.run():
                await manager.handle_request(scope, receive, send)
        finally:
            _CALLER.reset(caller)

    @asynccontextmanager
    async def _connect(self, ctx: Context | None) -> AsyncIterator[BoundaryApi]:
        """An in-process client of the whole app for the caller of `ctx`'s request."""
        if self.loop_back is None:  # pragma: no cover - set by create_app
            raise RuntimeError("the MCP endpoint has no app to call")
        request: Any = ctx.request_context.request if ctx is not None else None
        if request is None and (scope := _CALLER.get()) is not None:
            request = Request(scope)
        headers = getattr(request, "headers", None) or {}
        peer = getattr(request, "client", None)
        origin = self._origin(request)
        transport = httpx.ASGITransport(
            app=self.loop_back,
            raise_app_exceptions=False,  # a failure is the API's 500, said as such
            # A caller over the unix socket has no address: the same peer as on /api/v1.
            client=(peer.host, peer.port) if peer else (UNIX_PEER, 0),
        )
        forwarded = {k: headers[k] for k in FORWARDED if k in headers}
        async with httpx.AsyncClient(
            transport=transport, base_url=origin, headers=forwarded, timeout=LOOPBACK_TIMEOUT_S
        ) as client:
            yield BoundaryApi(client, self.settings.PUBLIC_BASE_URL or origin)

    @staticmethod
    def _origin(request: Any) -> str:
        """The origin the caller reached: its scheme and Host, as the API would see them."""
        url = getattr(request, "base_url", None)
        return str(url).rstrip("/") if url is not None else "http://localhost"
