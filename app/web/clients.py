"""Who a request comes from, as admission, the connection caps and the stream cap count it:
the peer's address, or, when the peer is a trusted proxy, the last address in
X-Forwarded-For that is not itself a trusted proxy. Read from the ASGI scope, so a
middleware and a route agree.

A connection over the unix socket of `boundary serve --uds` has no peer address (uvicorn
gives its scope no client): its peer is UNIX_PEER, so every process that reaches the
socket directly counts as one local client, as every process on the host does through
127.0.0.1. Behind a proxy on the socket (nginx's `proxy_pass http://unix:PATH:`), with
BOUNDARY_FORWARDED_ALLOW_UDS on, the socket's peer is trusted like an address of
BOUNDARY_FORWARDED_ALLOW_IPS and the client is the one its X-Forwarded-For names. From a
peer that is not trusted the header is never read.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.types import Scope

if TYPE_CHECKING:
    from app.settings import Settings

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Networks = Sequence[Network] | None
"""Trusted proxies' addresses; None trusts every address ("*")."""
UNIX_PEER = "unix:"
"""The peer of a connection over a unix socket, which has no address (nginx names its own
unix-socket clients so). No IP address reads like it."""


def parse_networks(text: str) -> list[Network] | None:
    """FORWARDED_ALLOW_IPS as networks; None for "*" (every peer is trusted)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if "*" in items:
        return None
    return [ipaddress.ip_network(item, strict=False) for item in items]


@dataclass(frozen=True)
class Proxies:
    """The peers whose X-Forwarded-For names the client: the addresses of `networks` (None:
    every address), and the unix socket's peer when `unix`."""

    networks: Networks = ()
    unix: bool = False

    @classmethod
    def from_settings(cls, settings: Settings) -> Proxies:
        """BOUNDARY_FORWARDED_ALLOW_IPS and BOUNDARY_FORWARDED_ALLOW_UDS."""
        return cls(parse_networks(settings.FORWARDED_ALLOW_IPS), settings.FORWARDED_ALLOW_UDS)

    def trust(self, host: str) -> bool:
        """Whether the peer (or forwarding hop) `host` is one of these proxies."""
        if host == UNIX_PEER:
            return self.unix
        if self.networks is None:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in net for net in self.networks)


def peer_of(scope: Scope) -> str:
    """The address of the request's peer, or UNIX_PEER for one without (a unix socket's)."""
    client = scope.get("client")
    return str(client[0]) if client else UNIX_PEER


def client_of(scope: Scope, trusted: Proxies) -> str:
    """The key a request's client is counted under (see the module's docstring)."""
    peer = peer_of(scope)
    forwarded = b",".join(v for k, v in scope["headers"] if k == b"x-forwarded-for")
    if not forwarded or not trusted.trust(peer):
        return peer
    hops = [h.strip() for h in forwarded.decode("latin-1").split(",") if h.strip()]
    for hop in reversed(hops):
        if not trusted.trust(hop):
            return hop[:64]
    return (hops[0] if hops else peer)[:64]
