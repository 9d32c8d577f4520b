"""What a guarded connection answers by itself, outside the app: a raw refusal (429, 503,
408) before a request is read, an app that answers every request with one of them, and
the transport a request's cycle sees, whose `close()` may linger (`app.web.connections`).
"""

from __future__ import annotations

import json
from typing import Any


def raw_response(status: int, reason: str, detail: str, extra: str = "") -> bytes:
    body = json.dumps({"detail": detail}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n{extra}\r\n"
    )
    return head.encode("latin-1") + body


def answer_app(status: int, raw: bytes) -> Any:
    """An ASGI app answering every request with `status` and the JSON body of `raw` (a
    response made by raw_response), closing the connection after."""
    body = raw.partition(b"\r\n\r\n")[2]
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        (b"retry-after", b"1"),
    ]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


class LingerOnClose:
    """The transport as a request's cycle sees it: the same, except that `close()` asks
    the protocol, which may linger (see the module's docstring)."""

    def __init__(self, protocol: Any) -> None:
        self._protocol = protocol
        self._transport = protocol.transport

    def close(self) -> None:
        self._protocol.close_after_response()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
