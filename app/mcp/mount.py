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

Bounded as the API is:

- only POST: in stateless mode there is no stream to open (`GET`, which the SDK would
  answer with an endless event stream outside every stream cap) nor session to end
  (`DELETE`), so both get 405;
- the body is read here, through the API's own body rules (`app.web.bodylimit`: the cap,
  408 for a body that stops arriving or arrives too slowly), before the SDK sees it;
- a call ends with its caller: once the body is in, the request's `receive` is watched,
  and when the client disconnects the call (the tool's waiting with it) is cancelled;
- a tool call that waits for a job holds one of the caller's streams
  (`app.web.streams.StreamLedger`, the cap on event streams per client and in all),
  so one client cannot keep hundreds of waits polling.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, ExitStack, asynccontextmanager, nullcontext
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import anyio
import httpx
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.mcp.api import BoundaryApi
from app.mcp.arguments import refused
from app.mcp.tools import build_server
from app.settings import Settings
from app.web.bodylimit import BodyLimit, BodyRules
from app.web.clients import UNIX_PEER, Proxies, client_of
from app.web.streams import StreamsFull

if TYPE_CHECKING:
    from app.state import AppState

log = logging.getLogger("boundary.mcp")

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
    the outer app exists) is what the tools' API requests are served by; `state` holds
    the app's stream caps once its API is built."""

    def __init__(self, app: ASGIApp, settings: Settings, state: AppState | None = None) -> None:
        self.app = app
        self.settings = settings
        self.state = state
        self.loop_back: ASGIApp | None = None
        self.server: MCPServer = build_server(self._connect)
        rules = BodyRules.from_settings(settings)
        self._bounded = BodyLimit(self._serve, lambda _: rules)
        self._trusted = Proxies.from_settings(settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in MCP_PATHS:
            await self.app(scope, receive, send)
            return
        if scope["method"] != "POST":
            await _not_allowed(send)
            return
        await self._bounded(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The call whose body arrives through `receive` (the body rules' own), cancelled
        when its client disconnects."""
        body = await _whole_body(receive)
        if body is None:
            log.info("POST /mcp: the client hung up before its body arrived")
            return
        answered = anyio.Event()

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body"):
                answered.set()  # first: a server's receive says "disconnect" once answered
            await send(message)

        async with anyio.create_task_group() as call:
            call.start_soon(_cancel_when_gone, receive, answered, call.cancel_scope)
            await self._handle(scope, _replayed(body), sending)
            call.cancel_scope.cancel()  # answered: stop watching

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
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
        scope = getattr(request, "scope", None) or _CALLER.get()
        caller = client_of(scope, self._trusted) if scope is not None else "?"
        async with httpx.AsyncClient(
            transport=transport, base_url=origin, headers=forwarded, timeout=LOOPBACK_TIMEOUT_S
        ) as client:
            base = self.settings.PUBLIC_BASE_URL or origin
            yield BoundaryApi(client, base, wait_slot=lambda: self._wait_slot(caller))

    def _wait_slot(self, caller: str) -> AbstractContextManager[object]:
        """One of `caller`'s streams, held while a tool waits for a job; a refusal naming
        `timeout_s` when the caller (or the server) holds as many as it may."""
        ledger = self.state.streams if self.state is not None else None
        if ledger is None:  # the API is not built yet: its own answer will say so
            return nullcontext()
        held = ExitStack()
        try:
            held.enter_context(ledger.hold(caller, "live streams and waiting tool calls"))
        except StreamsFull as full:
            raise refused(
                "timeout_s",
                f"{full.detail}; call with timeout_s 0 to have the id at once, and ask "
                "again with it later",
            ) from None
        return held

    @staticmethod
    def _origin(request: Any) -> str:
        """The origin the caller reached: its scheme and Host, as the API would see them."""
        url = getattr(request, "base_url", None)
        return str(url).rstrip("/") if url is not None else "http://localhost"


async def _whole_body(receive: Receive) -> bytes | None:
    """The request's body, read to its end; None when the client disconnected first."""
    parts = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


def _replayed(body: bytes) -> Receive:
    """A `receive` that gives `body` whole, then nothing more: the disconnect is watched
    apart (`_cancel_when_gone`)."""
    given = False

    async def receive() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    return receive


async def _cancel_when_gone(
    receive: Receive, answered: anyio.Event, call: anyio.CancelScope
) -> None:
    """Cancel `call` when the client disconnects before its answer was sent (nothing else
    arrives once the body is in)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    if not answered.is_set():
        log.info("POST /mcp: the client hung up; its call was cancelled")
        call.cancel()


async def _not_allowed(send: Send) -> None:
    body = json.dumps(
        {
            "detail": "/mcp takes POST only: it is stateless, so there is no stream to open "
            "(GET) and no session to end (DELETE)"
        }
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"allow", b"POST"),
    ]
    await send({"type": "http.response.start", "status": 405, "headers": headers})
    await send({"type": "http.response.body", "body": body})
