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
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Receive, Scope, Send

from app.web.clients import Proxies, client_of

STREAMS = re.compile(r"/runs/[^/]+/live|/api/v1/jobs/[^/]+/events")
"""The paths that answer with an event stream, matched whole."""
RETRY_AFTER_S = 5


def is_stream(scope: Scope) -> bool:
    return scope["method"] == "GET" and STREAMS.fullmatch(scope["path"]) is not None


@dataclass
class StreamLedger:
    """One app's caps and the streams it holds open, by client."""

    per_client: int
    total: int
    trusted: Proxies
    open: dict[str, int] = field(default_factory=dict)

    def count(self) -> int:
        return sum(self.open.values())


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
        client = client_of(scope, ledger.trusted)
        held = ledger.open.get(client, 0)
        if held >= ledger.per_client:
            detail = (
                f"this client has {held} live streams open, the most one client may have; "
                "close a run's page and try again"
            )
            await _answer(send, 429, detail)
            return
        if ledger.count() >= ledger.total:
            detail = f"the server holds its maximum of {ledger.total:,} live streams"
            await _answer(send, 503, detail)
            return
        ledger.open[client] = held + 1
        try:
            await self.app(scope, receive, send)
        finally:
            left = ledger.open[client] - 1
            if left:
                ledger.open[client] = left
            else:
                del ledger.open[client]


async def _answer(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(RETRY_AFTER_S).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
