"""Connections that cannot pin the server: a header deadline, a write deadline, caps on
connections (in all and per client) that displace stalled ones first, and a lingering
close for early answers.

uvicorn has no header read timeout: its keep-alive timer starts only after a first
response, so a connection that sends nothing, or one header byte every few seconds,
stays open for ever. `guarded_protocol(limits)` returns a subclass of uvicorn's httptools
protocol (`boundary serve` passes it as `uvicorn.Config(http=...)`) that adds:

- a header deadline (BOUNDARY_HEADER_TIMEOUT_S): a request line and headers must be
  complete within it of the connection opening (or of the request's first byte on a
  kept-alive connection), however slowly bytes arrive; past it the connection gets 408
  and is closed;
- a write deadline (BOUNDARY_WRITE_TIMEOUT_S): an answer the client stops reading
  (asyncio paused the writes: the socket's buffers are full) for that long, say a
  client that pipelines requests for a large file and reads nothing, closes the
  connection;
- a cap on open connections per client (BOUNDARY_MAX_CONNECTIONS_PER_CLIENT), the
  client as admission counts it (app.web.clients): the peer's address (over a unix
  socket, its one local peer), checked before a byte is read; past it, the new connection
  displaces that client's most stalled connection, or gets 429 before its request is read.
  Through a trusted proxy (BOUNDARY_FORWARDED_ALLOW_IPS, or the socket's peer with
  BOUNDARY_FORWARDED_ALLOW_UDS) the client is known only from a request's headers
  (X-Forwarded-For): such a connection is counted under it from then on, and a request
  past that client's cap gets 429 (connection closed);
- a cap on open connections (BOUNDARY_MAX_CONNECTIONS), checked before a byte is read:
  past it, the new connection displaces the most stalled connection (if it has been
  stalled at least DISPLACE_AFTER_S): one waiting for its request headers, one whose
  request body stopped arriving, or one whose answer the client does not read. So
  stalled connections cannot lock out real requests; when none is stalled, the new
  connection gets 503 before its request is read, and is closed after a short
  lingering drain;
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
It stays only while uvicorn has no header deadline of its own (Kludex/uvicorn#157, its
`--timeout-request-start`, is still open); `GuardedProtocol` is the whole of it, one
class at the top level, and `guarded_protocol(limits)` makes each server's subclass with
its own `Guard`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.web.clients import UNIX_PEER, Proxies, client_of
from app.web.raw_answers import LingerOnClose, answer_app, raw_response

LINGER_S = 2.0
"""How long a refused or early-answered connection is drained before it is closed."""
MAX_LINGERING = 1024
"""Connections drained at once; past it a refused connection is closed at once."""
DISPLACE_AFTER_S = 0.25
"""A connection stalled this long (headers, body or writes) may be displaced at a cap."""


@dataclass(frozen=True)
class ConnectionLimits:
    """What the protocol enforces (BOUNDARY_HEADER_TIMEOUT_S, BOUNDARY_MAX_CONNECTIONS,
    BOUNDARY_MAX_CONNECTIONS_PER_CLIENT, BOUNDARY_WRITE_TIMEOUT_S; `trusted`: the
    proxies of BOUNDARY_FORWARDED_ALLOW_IPS and BOUNDARY_FORWARDED_ALLOW_UDS)."""

    header_timeout_s: float = 10.0
    max_connections: int = 2000
    displace_after_s: float = DISPLACE_AFTER_S
    max_per_client: int = 256
    write_timeout_s: float = 30.0
    trusted: Proxies = field(default_factory=Proxies)


@dataclass
class Guard:
    """One server's connection limits and what they track: connections waiting for their
    headers (oldest first, with when they started), lingering ones, and each client's
    open connections (a trusted proxy's under the client each connection's latest
    request named), with the answers a refused connection gets."""

    limits: ConnectionLimits
    waiting: dict[HttpToolsProtocol, float] = field(default_factory=dict)
    lingering: set[HttpToolsProtocol] = field(default_factory=set)
    clients: dict[str, set[HttpToolsProtocol]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        limits = self.limits
        self.too_many = raw_response(
            429,
            "Too Many Requests",
            f"this client holds its maximum of {limits.max_per_client:,} connections "
            "(BOUNDARY_MAX_CONNECTIONS_PER_CLIENT); try again",
            "retry-after: 1\r\n",
        )
        self.refuse_app = answer_app(429, self.too_many)
        self.busy = raw_response(
            503,
            "Service Unavailable",
            f"the server holds its maximum of {limits.max_connections:,} connections; try again",
            "retry-after: 1\r\n",
        )
        self.late = raw_response(
            408,
            "Request Timeout",
            f"the request headers took longer than {limits.header_timeout_s:g} s",
        )


def guarded_protocol(limits: ConnectionLimits) -> type[HttpToolsProtocol]:
    """A protocol class for `uvicorn.Config(http=...)` enforcing `limits` (one per server)."""
    return type("GuardedProtocol", (GuardedProtocol,), {"guard": Guard(limits)})


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits above; `guard` is one server's state
    (`guarded_protocol` makes the subclass that carries it)."""

    guard: Guard

    _deadline: asyncio.TimerHandle | None = None
    _refused = False
    _draining = False
    _client_key: str | None = None
    _proxied = False
    _last_read = 0.0
    _paused_at: float | None = None
    _write_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._last_read = time.monotonic()
        # Over a unix socket uvicorn knows no peer address: the socket's one peer.
        peer = str(self.client[0]) if self.client else UNIX_PEER
        self._proxied = self.guard.limits.trusted.trust(peer)
        if not self._proxied:
            mine = self.guard.clients.setdefault(peer, set())
            if len(mine) >= self.guard.limits.max_per_client and not self._displace(mine):
                self._refuse(self.guard.too_many)
                return
            mine.add(self)
            self._client_key = peer
        if len(self.connections) > self.guard.limits.max_connections and not self._displace(
            self.connections
        ):
            self._refuse(self.guard.busy)
            return
        self._wait_for_headers()

    def _count_proxied(self) -> bool:
        """Through a trusted proxy: count this connection under the request's client
        from now on; True when that client is at its cap and none of its connections
        is stalled (the request is refused)."""
        if not self._proxied:
            return False
        key = client_of(cast(Any, self.scope), self.guard.limits.trusted)
        if key == self._client_key:
            return False
        self._forget_client()
        mine = self.guard.clients.setdefault(key, set())
        if len(mine) >= self.guard.limits.max_per_client and not self._displace(mine):
            if not mine:
                del self.guard.clients[key]
            return True
        mine.add(self)
        self._client_key = key
        return False

    def _forget_client(self) -> None:
        key, self._client_key = self._client_key, None
        mine = self.guard.clients.get(key) if key is not None else None
        if mine is not None:
            mine.discard(self)
            if not mine:
                del self.guard.clients[key]  # type: ignore[arg-type]

    # --- the write deadline --------------------------------------------------------

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_deadline is None:
            self._paused_at = time.monotonic()
            self._write_deadline = self.loop.call_later(
                self.guard.limits.write_timeout_s, self._write_too_late
            )

    def resume_writing(self) -> None:
        super().resume_writing()
        self._writes_flow()

    def _writes_flow(self) -> None:
        self._paused_at = None
        if self._write_deadline is not None:
            self._write_deadline.cancel()
            self._write_deadline = None

    def _write_too_late(self) -> None:
        self._write_deadline = None
        if not self.transport.is_closing():
            self.transport.abort()  # nothing more can be written to it: no answer

    def stalled_for(self, now: float) -> float | None:
        """How long this connection has been stalled, or None when it is not: waiting
        for its headers, its writes paused (the client reads nothing), or in a
        request body that stopped arriving (while the app wants more of it)."""
        since = self.guard.waiting.get(self)
        if since is not None:
            return now - since
        if self._paused_at is not None:
            return now - self._paused_at
        cycle = self.cycle
        if (
            cycle is not None
            and cycle.more_body
            and not cycle.response_complete
            and not self.flow.read_paused
            and not self._draining
        ):
            return now - self._last_read
        return None

    # --- the header deadline -------------------------------------------------------

    def _wait_for_headers(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(
                self.guard.limits.header_timeout_s, self._too_late
            )
            self.guard.waiting[self] = time.monotonic()

    def _headers_done(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self.guard.waiting.pop(self, None)

    def _too_late(self) -> None:
        self._deadline = None
        self.guard.waiting.pop(self, None)
        if self.transport.is_closing():
            return
        self.transport.write(self.guard.late)
        self._close_now()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._deadline is None:  # a kept-alive connection's next request:
            # No longer idle, and its headers have a deadline.
            self.guard.waiting.pop(self, None)
            self._wait_for_headers()

    def on_headers_complete(self) -> None:
        self._headers_done()
        app = self.app
        if self._count_proxied():
            self.app = self.guard.refuse_app  # this request's answer: 429, then close
        try:
            super().on_headers_complete()
        finally:
            self.app = app
        if self.cycle is not None:
            # The cycle closes the connection after a `Connection: close` answer.
            self.cycle.transport = LingerOnClose(self)  # type: ignore[assignment]

    def close_after_response(self) -> None:
        """The cycle's close: at once, or lingering when the body is not all read."""
        cycle = self.cycle
        unread = cycle is not None and cycle.more_body and not cycle.disconnected
        if self.transport.is_closing():
            return
        if (
            not unread
            or len(self.guard.lingering) >= MAX_LINGERING
            or not self.transport.can_write_eof()
        ):
            self.transport.close()
            return
        self._draining = True
        self.guard.lingering.add(self)
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
            self.guard.waiting.setdefault(self, time.monotonic())

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_done()
        self._writes_flow()
        self._forget_client()
        self.guard.lingering.discard(self)
        if self._refused:
            self.connections.discard(self)
            return
        super().connection_lost(exc)

    # --- the connection cap --------------------------------------------------------

    def _displace(self, among: Iterable[object]) -> bool:
        """Close the connection of `among` stalled longest (see `stalled_for`), if it
        has been stalled at least displace_after_s; True if one was closed."""
        now = time.monotonic()
        victim: Any = None
        longest = self.guard.limits.displace_after_s
        for other in among:
            stalled = None if other is self else cast(Any, other).stalled_for(now)
            if stalled is not None and stalled >= longest:
                victim, longest = other, stalled
        if victim is None:
            return False
        victim._headers_done()
        victim._forget_client()
        self.connections.discard(victim)  # counted out now; it is closing
        victim.transport.abort()  # its file descriptor is free at once
        return True

    def _refuse(self, answer: bytes) -> None:
        """Answer 503 or 429 before reading the request, then drain briefly and close."""
        self._refused = True
        self._forget_client()
        self.connections.discard(self)
        self.transport.write(answer)
        if len(self.guard.lingering) >= MAX_LINGERING or not self.transport.can_write_eof():
            self._close_now()
            return
        self.guard.lingering.add(self)
        self.transport.write_eof()  # the 503 then FIN; the client's request is drained
        self.loop.call_later(LINGER_S, self._close_now)

    def data_received(self, data: bytes) -> None:
        self._last_read = time.monotonic()
        if self._refused or self._draining:
            return  # drained, never parsed
        super().data_received(data)

    def eof_received(self) -> None:
        if self._refused or self._draining:
            self._close_now()

    def _close_now(self) -> None:
        self.guard.lingering.discard(self)
        if self.transport.is_closing():
            return
        if self.transport.get_write_buffer_size():
            self.transport.abort()  # a client that reads nothing cannot hold the fd
        else:
            self.transport.close()
