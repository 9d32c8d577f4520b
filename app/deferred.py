"""An ASGI app built in the background, so the server listens before FastAPI is loaded.

`boundary serve` answers reader pages from the fast path within a fraction of a second;
importing FastAPI and building every API route takes longer than that. This wrapper
builds the API app in a thread once the server has started, runs that app's lifespan
when it is ready, and holds any request that needs it until then. Nothing is refused:
an early API request waits a few hundred milliseconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

Built = tuple[ASGIApp, Callable[[], AbstractAsyncContextManager[Any]]]
"""The app, and a function opening its lifespan (started after the build)."""


BUILD_DELAY_S = 0.5
"""How long the build waits after start-up unless a request needs it sooner: the first
reader page then renders without competing with the build for the interpreter."""


class DeferredApp:
    """Serve `build()`'s app once it exists; build it off the event loop."""

    def __init__(self, build: Callable[[], Built]) -> None:
        self._build = build
        self._task: asyncio.Task[ASGIApp] | None = None
        self._lifespan_wanted = False
        self._lifespan: AbstractAsyncContextManager[Any] | None = None

    def _start(self) -> asyncio.Task[ASGIApp]:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._make())
        return self._task

    async def _make(self) -> ASGIApp:
        app, lifespan = await asyncio.to_thread(self._build)
        if self._lifespan_wanted:
            self._lifespan = lifespan()
            await self._lifespan.__aenter__()
        return app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._serve_lifespan(receive, send)
            return
        app = await self._start()
        await app(scope, receive, send)

    async def _serve_lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._lifespan_wanted = True
                asyncio.get_running_loop().call_later(BUILD_DELAY_S, self._start)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self._start()  # a server stopped at once still closes what it opened
                if self._lifespan is not None:
                    await self._lifespan.__aexit__(None, None, None)
                await send({"type": "lifespan.shutdown.complete"})
                return
