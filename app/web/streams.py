"""Event streams per client: at most BOUNDARY_MAX_STREAMS_PER_CLIENT open at once from one
client (429), and BOUNDARY_MAX_STREAMS in all (503).

An event stream (a run page's `/runs/{id}/live`, the API's `/api/v1/jobs/{id}/events`)
holds a connection and a little memory for as long as its job runs; thousands of them
from one client took the server to 1.4 GB. The client is the one admission counts
(app.web.clients). A stream's slot is held for exactly as long as the app's call for it
runs, so it is given back however the stream ends (finished job, client gone, server
error). Counts are per server process (per replica).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Receive, Scope, Send

from app.web.clients import Proxies, client_of

STREAMS = re.compile(r"/runs/[^/]+/live|/api/v1/jobs/[^/]+/events")
"""The paths that answer with an event stream, matched whole."""
RETRY_AFTER_S = 5


def is_stream(scope: Scope) -> bool:
    return scope["method"] == "GET" and STREAMS.fullmatch(scope["path"]) is not None


class StreamsFull(Exception):
    """A client holds as many streams as it may (429), or the server does (503)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass
class StreamLedger:
    """One app's caps and the streams it holds open, by client. An MCP tool call that
    waits for a job holds one too (app.mcp.mount): it holds a connection as long."""

    per_client: int
    total: int
    trusted: Proxies
    open: dict[str, int] = field(default_factory=dict)

    def count(self) -> int:
        return sum(self.open.values())

    @contextmanager
    def hold(self, client: str, what: str = "live streams") -> Iterator[None]:
        """One of `client`'s streams, held for the block and given back however it ends;
        StreamsFull, before the block, when the client or the server is at its cap."""
        held = self.open.get(client, 0)
        if held >= self.per_client:
            raise StreamsFull(
                429, f"this client has {held} {what} open, the most one client may have"
            )
        if self.count() >= self.total:
            raise StreamsFull(503, f"the server holds its maximum of {self.total:,} {what}")
        self.open[client] = held + 1
        try:
            yield
        finally:
            left = self.open[client] - 1
            if left:
                self.open[client] = left
            else:
                del self.open[client]


class StreamCap:
    """ASGI middleware: the caps above (see the module's docstring). `ledger_of` finds the
    ledger of the app a request is for: one StreamCap serves every app of a process
    (app.main.shared_api)."""

    def __init__(self, app: ASGIApp, ledger_of: Callable[[Scope], StreamLedger]) -> None:
        self.app = app
        self.ledger_of = ledger_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_stream(scope):
            await self.app(scope, receive, send)
            return
        ledger = self.ledger_of(scope)
        with ExitStack() as held:
            try:
                held.enter_context(ledger.hold(client_of(scope, ledger.trusted)))
            except StreamsFull as full:
                close = "; close a run's page and try again" if full.status == 429 else ""
                await _answer(send, full.status, full.detail + close)
                return
            await self.app(scope, receive, send)


async def _answer(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(RETRY_AFTER_S).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
