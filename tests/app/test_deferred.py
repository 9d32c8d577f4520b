"""`create_app(defer=True)`, as `boundary serve` runs it: reader pages come from the fast
path at once; the API app is built in the background and its lifespan still runs."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from app.web.deferred import DeferredApp
from tests.app.built import build_app, state_of

pytestmark = pytest.mark.anyio


async def test_reader_pages_do_not_wait_for_the_api(settings: Settings) -> None:
    app = create_app(settings, defer=True)
    deferred = app.app
    assert isinstance(deferred, DeferredApp)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        assert (await c.get("/read/jax-tpu/scale")).status_code == 200
        assert deferred._task is None  # nothing was built for a reader page
        r = await c.get("/api/v1/workloads")  # the first API request builds the API app
        assert r.status_code == 200 and r.json()["count"] >= 5
        assert (await c.get("/read/nowhere/compile")).status_code == 404


async def test_the_lifespan_starts_and_stops_the_dispatcher(settings: Settings) -> None:
    app = build_app(settings, defer=True)
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    running = asyncio.create_task(app(scope, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    assert (await asyncio.wait_for(outbox.get(), 5))["type"] == "lifespan.startup.complete"
    deferred = app.app
    assert isinstance(deferred, DeferredApp)
    await asyncio.wait_for(deferred._start(), 30)
    state = state_of(app)
    assert state.dispatcher._reaper is not None and not state.dispatcher._reaper.done()
    await inbox.put({"type": "lifespan.shutdown"})
    assert (await asyncio.wait_for(outbox.get(), 10))["type"] == "lifespan.shutdown.complete"
    await running
    assert state.dispatcher._reaper is None or state.dispatcher._reaper.done()
