"""The tools' one way into Boundary: its HTTP API, through an httpx client.

Both transports use it: `boundary mcp` with a client of a running server (the user's
token as the bearer), the server's /mcp endpoint with an in-process client of the same
app (the caller's own bearer token and address). Every refusal is therefore the API's
own (admission, caps, validation, the token) and reaches the assistant as a ToolError
carrying the API's message, never a stack trace.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager, nullcontext
from typing import Any

import httpx
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from workers.catalog import Refused as ApiRefused
from workers.catalog import ServerLost, refusal_text, wait_ended


class Refused(ToolError):
    """The API refused a request: its status, and its message as the tool's error."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


WaitSlot = Callable[[], AbstractContextManager[object]]
"""One of the caller's waits held for as long as the block runs (a tool that waits for a
job holds one); ToolError naming `timeout_s` when the caller holds as many as it may."""


class BoundaryApi:
    """The HTTP API of one Boundary server, for one tool call."""

    def __init__(
        self, client: httpx.AsyncClient, public_base: str, wait_slot: WaitSlot | None = None
    ) -> None:
        self.client = client
        self.public_base = public_base.rstrip("/")
        self._wait_slot = wait_slot

    def waiting(self, timeout_s: float) -> AbstractContextManager[object]:
        """A hold on one of the caller's waits while a tool waits up to `timeout_s` for a
        job (nothing to hold for a call that answers at once, or over stdio, where the
        one caller is the user's own assistant)."""
        if timeout_s <= 0 or self._wait_slot is None:
            return nullcontext()
        return self._wait_slot()

    def address(self, path: str) -> str:
        """The absolute address of `path` (a page, a run) on the server, for a person."""
        return self.public_base + path

    async def get(self, path: str, params: dict[str, str] | None = None) -> Any:
        """The JSON the API answers a GET of `path` with; ToolError for a refusal."""
        return (await self._send("GET", path, params=params)).json()

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        """The JSON the API answers a POST of `body` to `path` with; ToolError for a refusal."""
        return (await self._send("POST", path, json=body)).json()

    async def text(self, path: str) -> tuple[str, bool]:
        """The text at `path`, and whether the server stored it cut (its own cap)."""
        response = await self._send("GET", path)
        return response.text, response.headers.get("x-boundary-truncated") == "true"

    async def _send(self, method: str, path: str, **options: Any) -> httpx.Response:
        try:
            response = await self.client.request(method, path, **options)
        except httpx.TransportError as exc:
            raise ToolError(
                f"cannot reach the Boundary server at {self.public_base}: {exc!s}"[:500]
            ) from None
        if response.is_success:
            return response
        raise Refused(
            f"refused by the Boundary API: {refusal_text(response)}", response.status_code
        )

    async def follow(self, path: str, timeout_s: float) -> Any:
        """The JSON of `path` (a job or a fit search) once its status ended, or the last
        answer when `timeout_s` passed first: the wait every client shares, which rides
        out a server that restarts on the way (until `timeout_s`)."""
        try:
            return await wait_ended(self.client, path, timeout_s=timeout_s)
        except ApiRefused as exc:
            raise Refused(f"refused by the Boundary API: {exc}", exc.status) from None
        except ServerLost as exc:
            raise ToolError(
                f"cannot reach the Boundary server at {self.public_base}: {exc!s}"[:500]
            ) from None


Connect = Callable[[Context | None], AbstractAsyncContextManager[BoundaryApi]]
"""How a tool reaches the API for the request `Context` it serves (None for a resource
read, which needs no token): a client for that caller, closed after the call."""
