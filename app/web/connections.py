"""Connections that cannot pin the server: a header deadline, a cap on connections that
displaces stalled ones first, and a lingering close for early answers.

uvicorn has no header read timeout: its keep-alive timer starts only after a first
response, so a connection that sends nothing, or one header byte every few seconds,
stays open for ever. `guarded_protocol(limits)` returns a subclass of uvicorn's httptools
protocol (`boundary serve` passes it as `uvicorn.Config(http=...)`) that adds:

- a header deadline (BOUNDARY_HEADER_TIMEOUT_S): a request line and headers must be
  complete within it of the connection opening (or of the request's first byte on a
  kept-alive connection), however slowly bytes arrive; past it the connection gets 408
  and is closed;
- a cap on open connections (BOUNDARY_MAX_CONNECTIONS), checked before a byte is read:
  past it, the new connection displaces the connection that has waited longest for its
  request headers (if it has waited at least DISPLACE_AFTER_S), so stalled connections
  cannot lock out real requests; when none is waiting, the new connection gets 503
  before its request is read, and is closed after a short lingering drain;
- a lingering close for early answers: when the app answers before the request's body
  is all read (401 to a tokenless upload, 413), the answer is followed by FIN and the
  rest of the body is read and dropped for up to LINGER_S before the socket closes.
  Closing at once with unread bytes makes Linux send RST, and the client, still sending,
  sees "connection reset" instead of the answer.

uvicorn's own `limit_concurrency` does not do this: it counts every open connection
(half-open ones too) but is checked only once a request's headers are complete, so a
connection past it is still accepted and read with no deadline, and once stalled
connections fill it every request, /healthz included, gets 503.

This hooks uvicorn's internals (connection_made, on_message_begin, on_headers_complete,
on_response_complete, the cycle's transport and more_body): pyproject pins uvicorn below
its next minor version, and tests/app/test_connections.py fails if an upgrade moves them.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

LINGER_S = 2.0
"""How long a refused or early-answered connection is drained before it is closed."""
MAX_LINGERING = 1024
"""Connections drained at once; past it a refused connection is closed at once."""
DISPLACE_AFTER_S = 0.25
"""A connection that has waited this long for its headers may be displaced at the cap."""


@dataclass(frozen=True)
class ConnectionLimits:
    """What the protocol enforces (BOUNDARY_HEADER_TIMEOUT_S, BOUNDARY_MAX_CONNECTIONS)."""

    header_timeout_s: float = 10.0
    max_connections: int = 2000
    displace_after_s: float = DISPLACE_AFTER_S


def _raw_response(status: int, reason: str, detail: str, extra: str = "") -> bytes:
    body = json.dumps({"detail": detail}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n{extra}\r\n"
    )
    return head.encode("latin-1") + body


def guarded_protocol(limits: ConnectionLimits) -> type[HttpToolsProtocol]:
    """A protocol class for `uvicorn.Config(http=...)` enforcing `limits` (one per server)."""

    waiting: dict[HttpToolsProtocol, float] = {}
    """Connections waiting for request headers, oldest first, with when they started."""
    lingering: set[HttpToolsProtocol] = set()
    busy = _raw_response(
        503,
        "Service Unavailable",
        f"the server holds its maximum of {limits.max_connections:,} connections; try again",
        "retry-after: 1\r\n",
    )
    late = _raw_response(
        408,
        "Request Timeout",
        f"the request headers took longer than {limits.header_timeout_s:g} s",
    )

    class GuardedProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol with the limits above."""

        _deadline: asyncio.TimerHandle | None = None
        _refused = False
        _draining = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections and not self._displace():
                self._refuse()
                return
            self._wait_for_headers()

        # --- the header deadline -------------------------------------------------------

        def _wait_for_headers(self) -> None:
            if self._deadline is None:
                self._deadline = self.loop.call_later(limits.header_timeout_s, self._too_late)
                waiting[self] = time.monotonic()

        def _headers_done(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            waiting.pop(self, None)

        def _too_late(self) -> None:
            self._deadline = None
            waiting.pop(self, None)
            if self.transport.is_closing():
                return
            self.transport.write(late)
            self._close_now()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._deadline is None:  # a kept-alive connection's next request:
                waiting.pop(self, None)  # no longer idle, and its headers have a deadline
                self._wait_for_headers()

        def on_headers_complete(self) -> None:
            self._headers_done()
            super().on_headers_complete()
            if self.cycle is not None:
                # The cycle closes the connection after a `Connection: close` answer.
                self.cycle.transport = _LingerOnClose(self)  # type: ignore[assignment]

        def close_after_response(self) -> None:
            """The cycle's close: at once, or lingering when the body is not all read."""
            cycle = self.cycle
            unread = cycle is not None and cycle.more_body and not cycle.disconnected
            if self.transport.is_closing():
                return
            if not unread or len(lingering) >= MAX_LINGERING or not self.transport.can_write_eof():
                self.transport.close()
                return
            self._draining = True
            lingering.add(self)
            self.transport.write_eof()
            self.flow.resume_reading()
            self.loop.call_later(LINGER_S, self._close_now)

        def on_response_complete(self) -> None:
            if self._draining:
                self.server_state.total_requests += 1
                return
            super().on_response_complete()
            # Idle between requests: displaceable, though uvicorn's keep-alive timer (not
            # this deadline) closes it if no next request starts.
            if not self.transport.is_closing() and self.timeout_keep_alive_task is not None:
                waiting.setdefault(self, time.monotonic())

        def connection_lost(self, exc: Exception | None) -> None:
            self._headers_done()
            lingering.discard(self)
            if self._refused:
                self.connections.discard(self)
                return
            super().connection_lost(exc)

        # --- the connection cap --------------------------------------------------------

        def _displace(self) -> bool:
            """Close the connection that has waited longest for its headers, if it has
            waited at least displace_after_s; True if one was closed."""
            for victim, since in waiting.items():
                if victim is self:
                    continue
                if time.monotonic() - since < limits.displace_after_s:
                    return False
                waiting.pop(victim)
                deadline = getattr(victim, "_deadline", None)
                if deadline is not None:
                    deadline.cancel()
                victim.transport.abort()  # its file descriptor is free at once
                return True
            return False

        def _refuse(self) -> None:
            """Answer 503 before reading the request, then drain briefly and close."""
            self._refused = True
            self.connections.discard(self)
            self.transport.write(busy)
            if len(lingering) >= MAX_LINGERING or not self.transport.can_write_eof():
                self._close_now()
                return
            lingering.add(self)
            self.transport.write_eof()  # the 503 then FIN; the client's request is drained
            self.loop.call_later(LINGER_S, self._close_now)

        def data_received(self, data: bytes) -> None:
            if self._refused or self._draining:
                return  # drained, never parsed
            super().data_received(data)

        def eof_received(self) -> None:
            if self._refused or self._draining:
                self._close_now()

        def _close_now(self) -> None:
            lingering.discard(self)
            if self.transport.is_closing():
                return
            if self.transport.get_write_buffer_size():
                self.transport.abort()  # a client that reads nothing cannot hold the fd
            else:
                self.transport.close()

    return GuardedProtocol


class _LingerOnClose:
    """The transport as a request's cycle sees it: the same, except that `close()` asks
    the protocol, which may linger (see the module's docstring)."""

    def __init__(self, protocol: Any) -> None:
        self._protocol = protocol
        self._transport = protocol.transport

    def close(self) -> None:
        self._protocol.close_after_response()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
