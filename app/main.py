"""The application factory: `create_app(settings)` builds a fresh ASGI app.

Layers, outermost first: FastPath (pre-rendered reader pages and static files from
memory), SecurityHeaders (CSP and framing for everything else), then FastAPI routes,
which `boundary serve` builds in the background (app.web.deferred) so it answers sooner.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import lru_cache, partial
from typing import TYPE_CHECKING

from starlette.types import ASGIApp

from app.reader.content import load_content
from app.reader.site import Deferred, names_origin, render_site
from app.settings import Settings, get_settings
from app.state import AppState
from app.web.assets import build_assets
from app.web.deferred import Built, DeferredApp
from app.web.fastpath import Entry, FastPath, PerOrigin, Resource, Resources
from app.web.security import SecurityHeaders, security_headers
from app.web.templating import make_environment, server_linker

if TYPE_CHECKING:  # the API side is imported when it is built (see build_api)
    from fastapi import APIRouter, FastAPI

    from app.dispatch import Dispatcher
    from app.store import Store

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
        resources[url] = Resource(Entry(asset.body, asset.content_type, headers))
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


def _fastapi(dispatcher: Dispatcher) -> FastAPI:
    """The FastAPI app as documented, no route yet; `dispatcher` runs for its lifespan."""
    from fastapi import FastAPI

    from app.routes.schemas import ValidationErrorPublic

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        dispatcher.start()  # the reaper, and the news from other replicas
        yield
        await dispatcher.stop()  # (the store stays open: a lifespan may run again)

    return FastAPI(
        title="Boundary",
        summary="Execution reader and measurement bench for JAX and CUDA.",
        version="0.1.0",
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
        lifespan=lifespan,
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


def build_api(state: AppState) -> Built:
    """The FastAPI app with every route, and the function that opens its lifespan."""
    from app.dispatch import Dispatcher
    from app.queue.admission import Admission
    from app.queue.fits import FitSearches
    from app.routes import pages
    from app.web.bodylimit import BodyLimit
    from app.web.clients import parse_networks
    from app.web.streams import StreamCap

    settings = state.settings
    dispatcher = Dispatcher(_open_store(settings), settings)
    state.dispatcher = dispatcher
    state.admission = Admission(dispatcher, settings)
    FitSearches(state.admission).watch()  # probes' ends move their searches on
    api = _fastapi(dispatcher)
    api.state.boundary = state
    pages.install(api)
    for router in _routers():
        api.include_router(router)
    api.add_middleware(BodyLimit, settings=settings)  # every body through one cap
    api.add_middleware(
        StreamCap,
        per_client=settings.MAX_STREAMS_PER_CLIENT,
        total=settings.MAX_STREAMS,
        trusted=parse_networks(settings.FORWARDED_ALLOW_IPS),
    )
    return SecurityHeaders(api, settings.FRAME_ANCESTORS), lambda: api.router.lifespan_context(api)


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

    mount = McpMount(inner, settings)  # /mcp, off unless BOUNDARY_MCP=1
    app = FastPath(mount, build_resources(state))
    mount.loop_back = app  # its tools call the API through the whole app, in-process
    return app
