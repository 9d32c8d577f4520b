"""Where a Boundary server listens, as every `--server` option names it, and the one place
that turns it into an HTTP client: `boundary worker`, `run`, `fit`, `mcp` and `export-fn
--upload` all come here.

A server is named by its URL (`http://host:8000`, `https://…`) or by the unix socket
`boundary serve --uds PATH` listens on, written `unix:PATH` or `unix://PATH`. Over a socket
the requests go to `http://localhost` (the Host header a server behind no proxy sees), and
the pages' addresses are written the way nginx names an address on a socket,
`http://unix:PATH:/runs/ID`: no browser opens those, but they say which server and page
they are (`curl --unix-socket PATH http://localhost/runs/ID` fetches one).

Light, like the rest of this package: the standard library, and httpx once a client is
made (export-fn imports it only for `--upload`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import httpx

SOCKET_PREFIXES = ("unix://", "unix:")
"""How a `--server` value names a unix socket (the longer spelling first)."""
EXAMPLES = "http://127.0.0.1:8000 or unix:/run/boundary.sock"
SOCKET_ORIGIN = "http://localhost"
"""Where requests over a unix socket go: the socket is the connection, this only the URL."""


@dataclass(frozen=True)
class ServerAddress:
    """A Boundary server: its URL (no trailing slash), or the path of its unix socket
    (`socket`, with `url` then SOCKET_ORIGIN)."""

    url: str
    socket: str | None = None

    @classmethod
    def parse(cls, text: str) -> ServerAddress:
        """The server `text` names; ValueError saying what a `--server` value looks like."""
        given = text.strip()
        for prefix in SOCKET_PREFIXES:
            if given.startswith(prefix):
                path = given[len(prefix) :]
                if not path:
                    raise ValueError(f"give the socket's path after {prefix} (e.g. {EXAMPLES})")
                return cls(SOCKET_ORIGIN, os.path.abspath(os.path.expanduser(path)))
        parts = urlsplit(given)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"give the server's address, e.g. {EXAMPLES} (not {given[:80]!r})")
        return cls(given.rstrip("/"))

    @property
    def public_base(self) -> str:
        """What the server's page addresses start with, for people to read (see the
        module's docstring for a socket's)."""
        return f"http://unix:{self.socket}:" if self.socket else self.url

    def link(self, path: str) -> str:
        """The address of the server's page at `path` (which starts with "/")."""
        return self.public_base + path

    def __str__(self) -> str:
        return f"unix:{self.socket}" if self.socket else self.url

    def client(self, token: str | None = None, timeout: float = 30.0) -> httpx.Client:
        """A client of this server whose requests carry `token` as their bearer token."""
        import httpx

        transport = httpx.HTTPTransport(uds=self.socket) if self.socket else None
        return httpx.Client(
            transport=transport,
            base_url=self.url,
            headers=bearer(token),
            timeout=timeout,
            trust_env=self.socket is None,  # see `async_client`
        )

    def async_client(self, token: str | None = None, timeout: float = 30.0) -> httpx.AsyncClient:
        """`client`, for asyncio."""
        import httpx

        transport = httpx.AsyncHTTPTransport(uds=self.socket) if self.socket else None
        return httpx.AsyncClient(
            transport=transport,
            base_url=self.url,
            headers=bearer(token),
            timeout=timeout,
            # A socket is reached directly: an HTTP_PROXY of the environment would
            # otherwise send its requests to that proxy instead.
            trust_env=self.socket is None,
        )


def bearer(token: str | None) -> dict[str, str]:
    """The Authorization header that presents `token`, or none."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def server_option(text: str) -> ServerAddress:
    """`--server`'s argparse type: the server `text` names, or a usage error saying why not."""
    import argparse

    try:
        return ServerAddress.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
