"""Who a request comes from, as admission and the stream cap count it: the peer's
address, or, when the peer is a trusted proxy (BOUNDARY_FORWARDED_ALLOW_IPS), the last
address in X-Forwarded-For that is not itself a trusted proxy. Read from the ASGI scope,
so a middleware and a route agree."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from starlette.types import Scope

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Networks = Sequence[Network] | None
"""Trusted proxies; None trusts every peer ("*")."""


def parse_networks(text: str) -> list[Network] | None:
    """FORWARDED_ALLOW_IPS as networks; None for "*" (every peer is trusted)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if "*" in items:
        return None
    return [ipaddress.ip_network(item, strict=False) for item in items]


def trusted_peer(host: str, trusted: Networks) -> bool:
    """Whether `host` is one of the trusted proxies."""
    if trusted is None:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in net for net in trusted)


def client_of(scope: Scope, trusted: Networks) -> str:
    """The key a request's client is counted under (see the module's docstring)."""
    peer = str(scope["client"][0]) if scope.get("client") else "?"
    forwarded = b",".join(v for k, v in scope["headers"] if k == b"x-forwarded-for")
    if not forwarded or not trusted_peer(peer, trusted):
        return peer
    hops = [h.strip() for h in forwarded.decode("latin-1").split(",") if h.strip()]
    for hop in reversed(hops):
        if not trusted_peer(hop, trusted):
            return hop[:64]
    return (hops[0] if hops else peer)[:64]
