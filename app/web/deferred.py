"""An ASGI app built in the background, so the server listens before FastAPI is loaded.

`boundary serve` answers reader pages from the fast path within a fraction of a second;
importing FastAPI and building every API route takes longer than that. This wrapper
builds the API app in a thread once the server has started, runs that app's lifespan
when it is ready, and holds any request that needs it until then. Nothing is refused:
an early API request waits a few hundred milliseconds.

A build that fails is not served as an error on every request: `on_failure` hears of it
(`boundary serve` then stops and exits non-zero with the error), and requests get 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger("boundary.serve")

Built = tuple[ASGIApp, Callable[[], AbstractAsyncContextManager[Any]]]
"""The app, and a function opening its lifespan (started after the build)."""


BUILD_DELAY_S = 0.5
"""How long the build waits after start-up unless a request needs it sooner: the first
reader page then renders without competing with the build for the interpreter."""


class DeferredApp:
    """Serve `build()`'s app once it exists; build it off the event loop."""

    def __init__(
        self,
        build: Callable[[], Built],
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        self._build = build
        self._on_failure = on_failure
        self.failure: BaseException | None = None
        self._task: asyncio.Task[ASGIApp] | None = None
        self._lifespan_wanted = False
        self._lifespan: AbstractAsyncContextManager[Any] | None = None

    def _start(self) -> asyncio.Task[ASGIApp]:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._make())
        return self._task

    async def _make(self) -> ASGIApp:
        try:
            app, lifespan = await asyncio.to_thread(self._build)
        except Exception as exc:
            self.failure = exc
            log.error("building the API app failed: %r", exc, exc_info=exc)
            if self._on_failure is not None:
                self._on_failure(exc)
            raise
        if self._lifespan_wanted:
            self._lifespan = lifespan()
            await self._lifespan.__aenter__()
        return app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._serve_lifespan(receive, send)
            return
        try:
            app = await self._start()
        except Exception:  # noqa: BLE001 - logged and reported where the build failed
            await _unavailable(scope, send)
            return
        await app(scope, receive, send)

    async def _serve_lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._lifespan_wanted = True
                asyncio.get_running_loop().call_later(BUILD_DELAY_S, self._start)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                with contextlib.suppress(Exception):  # a failed build opened nothing
                    await self._start()  # a server stopped at once still closes what it opened
                if self._lifespan is not None:
                    await self._lifespan.__aexit__(None, None, None)
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _unavailable(scope: Scope, send: Send) -> None:
    """503 for a request that came after the API app failed to build."""
    if scope["type"] != "http":
        return
    body = b'{"detail":"the server failed to start; see its log"}'
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})
