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

from starlette.types import ASGIApp, Receive, Scope, Send

from app.web.clients import Networks, client_of

STREAMS = re.compile(r"/runs/[^/]+/live|/api/v1/jobs/[^/]+/events")
"""The paths that answer with an event stream, matched whole."""
RETRY_AFTER_S = 5


def is_stream(scope: Scope) -> bool:
    return scope["method"] == "GET" and STREAMS.fullmatch(scope["path"]) is not None


class StreamCap:
    """ASGI middleware: the caps above (see the module's docstring)."""

    def __init__(self, app: ASGIApp, per_client: int, total: int, trusted: Networks) -> None:
        self.app = app
        self.per_client = per_client
        self.total = total
        self.trusted = trusted
        self.open: dict[str, int] = {}

    def count(self) -> int:
        return sum(self.open.values())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_stream(scope):
            await self.app(scope, receive, send)
            return
        client = client_of(scope, self.trusted)
        held = self.open.get(client, 0)
        if held >= self.per_client:
            detail = (
                f"this client has {held} live streams open, the most one client may have; "
                "close a run's page and try again"
            )
            await _answer(send, 429, detail)
            return
        if self.count() >= self.total:
            await _answer(send, 503, f"the server holds its maximum of {self.total:,} live streams")
            return
        self.open[client] = held + 1
        try:
            await self.app(scope, receive, send)
        finally:
            left = self.open[client] - 1
            if left:
                self.open[client] = left
            else:
                del self.open[client]


async def _answer(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(RETRY_AFTER_S).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
