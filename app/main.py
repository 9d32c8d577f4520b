"""The application factory: `create_app(settings)` builds a fresh ASGI app.

Layers, outermost first: FastPath (pre-rendered reader pages and static files from
memory), SecurityHeaders (CSP and framing for everything else), then FastAPI routes,
which `boundary serve` builds in the background (app.web.deferred) so it answers sooner.
The FastAPI app is built once per process and shared by every app the process builds,
each putting its own state in the requests it passes on (app.state.Bound).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import cache, lru_cache, partial
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Scope

from app.reader.content import load_content
from app.reader.site import Deferred, names_origin, render_site
from app.settings import Settings, get_settings
from app.state import AppState, Bound, state_of_scope
from app.web.assets import build_assets
from app.web.deferred import Built, DeferredApp
from app.web.fastpath import ASSET_QUALITY, Entry, FastPath, PerOrigin, Resource, Resources
from app.web.security import SecurityHeaders, security_headers
from app.web.templating import make_environment, server_linker

if TYPE_CHECKING:  # the API side is imported when it is built (see build_api)
    from fastapi import APIRouter, FastAPI

    from app.dispatch import Dispatcher
    from app.store import Store
    from app.web.bodylimit import BodyRules
    from app.web.streams import StreamLedger

__all__ = ["AppState", "build_api", "create_app"]

PAGE_CACHE = (b"cache-control", b"no-cache")
ASSET_CACHE = (b"cache-control", b"public, max-age=31536000, immutable")


def build_resources(state: AppState) -> Resources:
    """The reader's renderings (made on first request) and the static files, with headers."""
    settings = state.settings
    public_base = (settings.PUBLIC_BASE_URL or "").rstrip("/")
    resources: Resources = {}

    def resource(deferred: Deferred) -> Resource:
        r = deferred.make()
        headers = [PAGE_CACHE, *security_headers(r.url, settings.FRAME_ANCESTORS)]
        fragment = Entry(r.fragment, r.content_type, headers) if r.fragment else None
        return Resource(Entry(r.body, r.content_type, headers), fragment)

    def site(base: str) -> list[Deferred]:
        return render_site(
            state.content, state.env, state.assets, linker=server_linker, public_base=base
        )

    @lru_cache(maxsize=8)
    def site_at(origin: str) -> dict[str, Deferred]:
        return {d.url: d for d in site(origin)}

    def at_origin(url: str, origin: str) -> Resource:
        return resource(site_at(origin)[url])

    for deferred in site(public_base):
        if not public_base and names_origin(deferred.url):
            # Its embed snippet and oEmbed link must be absolute: the request's origin.
            resources[deferred.url] = PerOrigin(partial(at_origin, deferred.url))
        else:
            resources[deferred.url] = partial(resource, deferred)
    for asset in state.assets.values():
        url = f"/static/{asset.name}"
        headers = [ASSET_CACHE, *security_headers(url, settings.FRAME_ANCESTORS)]
        entry = Entry(asset.body, asset.content_type, headers, quality=ASSET_QUALITY)
        resources[url] = Resource(entry)
    return resources


def _open_store(settings: Settings) -> Store:
    """The store at BOUNDARY_DB, with its timeouts, pool and commit settings."""
    from app.store import Store, Timeouts

    return Store.open(
        settings.DB,
        settings.RETAIN_RUNS,
        timeouts=Timeouts(
            connect_s=settings.DB_TIMEOUT_S,
            lock_s=settings.DB_TIMEOUT_S,
            statement_s=settings.DB_STATEMENT_TIMEOUT_S,
        ),
        pool_size=settings.DB_POOL_SIZE,
        synchronous_commit=settings.DB_SYNCHRONOUS_COMMIT,
    )


def _fastapi() -> FastAPI:
    """The FastAPI app as documented, no route yet (each app runs its own lifespan)."""
    from fastapi import FastAPI

    from app.routes.schemas import ValidationErrorPublic

    return FastAPI(
        title="Boundary",
        summary="Execution reader and measurement bench for JAX and CUDA.",
        version="0.1.0",
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
        # Every route answers a bad request with the server's own 422 body (each problem
        # naming its field); saying so here also keeps FastAPI from documenting its
        # {loc, msg, type} body, which this server never sends.
        responses={
            422: {"model": ValidationErrorPublic, "description": "A field is wrong; it is named."}
        },
    )


def _routers() -> tuple[APIRouter, ...]:
    """Every router of the API but the pages', in the order requests are matched."""
    from app.routes import api as api_routes
    from app.routes import (
        artifact_form,
        artifact_targets,
        artifacts,
        chips,
        compare,
        fit_pages,
        fits,
        hlo_diff,
        matrices,
        memory,
        ops,
        pipeline,
        run_form,
        runs,
        worker_api,
    )

    return (
        api_routes.router,
        memory.api_router,
        worker_api.router,
        ops.router,
        run_form.router,
        runs.router,
        memory.page_router,
        chips.api_router,
        chips.page_router,
        pipeline.router,
        compare.router,
        hlo_diff.api_router,
        hlo_diff.page_router,
        artifact_form.router,
        artifact_targets.router,
        artifacts.router,
        matrices.router,
        fits.router,
        fit_pages.router,
    )


def _body_rules(scope: Scope) -> BodyRules:
    rules = state_of_scope(scope).body_rules
    assert rules is not None, "build_api sets them"
    return rules


def _streams(scope: Scope) -> StreamLedger:
    ledger = state_of_scope(scope).streams
    assert ledger is not None, "build_api sets it"
    return ledger


@cache
def _api() -> FastAPI:
    from app.routes import document, pages
    from app.web.bodylimit import BodyLimit
    from app.web.streams import StreamCap

    api = _fastapi()
    pages.install(api)
    for router in _routers():
        api.include_router(router)
    document.install(api)  # and the answers of the layers in front of the routes
    api.add_middleware(BodyLimit, rules_of=_body_rules)  # every body through one cap
    api.add_middleware(StreamCap, ledger_of=_streams)
    return api


_API_LOCK = threading.Lock()


def shared_api() -> FastAPI:
    """The process's API app: every route, handler and cap, built on first use (about 0.2
    s of CPU) and served to every app the process builds, each with its own state
    (app.state.Bound)."""
    with _API_LOCK:  # `serve` builds it in a thread, and a request may want it meanwhile
        return _api()


@asynccontextmanager
async def _dispatching(dispatcher: Dispatcher) -> AsyncIterator[None]:
    """An app's lifespan: its dispatcher runs (the reaper, the news from other replicas)."""
    dispatcher.start()
    yield
    await dispatcher.stop()  # (the store stays open: a lifespan may run again)


def build_api(state: AppState) -> Built:
    """The API side of one app: its dispatcher, admission and caps, served by the
    process's shared API app, and the function that opens its lifespan."""
    from app.dispatch import Dispatcher
    from app.pages.compare.hlo_diffs import HloDiffs
    from app.queue.admission import Admission
    from app.queue.fits import FitSearches
    from app.web.bodylimit import BodyRules
    from app.web.clients import Proxies
    from app.web.streams import StreamLedger

    settings = state.settings
    api = shared_api()
    dispatcher = Dispatcher(_open_store(settings), settings)
    state.dispatcher = dispatcher
    state.admission = Admission(dispatcher, settings)
    state.hlo_diffs = HloDiffs(dispatcher.store, settings.HLO_DIFF_CACHE_BYTES)
    FitSearches(state.admission).watch()  # probes' ends move their searches on
    state.body_rules = BodyRules.from_settings(settings)
    state.streams = StreamLedger(
        settings.MAX_STREAMS_PER_CLIENT,
        settings.MAX_STREAMS,
        Proxies.from_settings(settings),
    )
    lifespan = partial(_dispatching, dispatcher)
    return SecurityHeaders(Bound(api, state, lifespan), settings.FRAME_ANCESTORS), lifespan


def create_app(
    settings: Settings | None = None,
    *,
    defer: bool = False,
    on_build_failure: Callable[[BaseException], None] | None = None,
    on_state: Callable[[AppState], None] | None = None,
) -> FastPath:
    """A new Boundary app. Raises ContentError if the content files are wrong.

    With `defer`, the API app (FastAPI and every route) is built in the background once
    the server starts, so reader pages are served before it exists (`boundary serve`);
    `on_build_failure` hears if that build fails.
    """
    settings = settings or get_settings()
    content = load_content(settings.CONTENT_DIR)
    state = AppState(settings, content, make_environment(), build_assets())
    if on_state is not None:  # `serve` reaches the dispatcher through it to drain
        on_state(state)
    inner: ASGIApp = (
        DeferredApp(lambda: build_api(state), on_build_failure) if defer else build_api(state)[0]
    )
    if not settings.MCP:
        return FastPath(inner, build_resources(state))
    from app.mcp.mount import McpMount

    mount = McpMount(inner, settings, state)  # /mcp, off unless BOUNDARY_MCP=1
    app = FastPath(mount, build_resources(state))
    mount.loop_back = app  # its tools call the API through the whole app, in-process
    return app
