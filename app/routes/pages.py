"""HTML routes that are not pre-rendered: 404s, oEmbed, health."""

from __future__ import annotations

import re
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response

from app.reader.content import READER_PATHS, READER_STAGES
from app.reader.views import embed_url, not_found_context
from app.routes import errors
from app.routes.schemas import MessagePublic
from app.state import state_of_scope
from app.web.problems import request_problems
from app.web.templating import server_linker
from workers.protocol import PathId, StageId

EMBED_WIDTH = 720
EMBED_HEIGHT = 900
MAX_DIMENSION = 10_000

_READER_URL = re.compile(r"^/(?:read|embed)/([a-z-]+)/([a-z-]+)/?$")


def _state(request: Request) -> Any:
    return state_of_scope(request.scope)


def not_found_page(request: Request, what: str) -> Response:
    """A 404 naming the valid paths and stages, as HTML or JSON by the URL's suffix."""
    state = _state(request)
    ctx = not_found_context(state.content, what)
    if request.url.path.endswith(".json") or request.url.path.startswith("/api/"):
        return JSONResponse(
            {
                "detail": what,
                "valid_paths": ctx["valid_paths"],
                "valid_stages": ctx["valid_stages"],
            },
            status_code=404,
        )
    assets = state.assets
    html = state.env.get_template("404.html").render(
        **ctx,
        link=server_linker(""),
        static=lambda name: assets[name].url,
        export=False,
        nav="",
    )
    return HTMLResponse(html, status_code=404)


def _describe_unknown(path: str) -> str:
    m = _READER_URL.match(path.removesuffix(".json"))
    if not m:
        return f"There is no page at {path[:200]}."
    p, s = m.groups()
    problems = []
    if p not in {x.value for x in READER_PATHS}:
        problems.append(f"unknown path {p[:40]!r}")
    if s not in {x.value for x in READER_STAGES}:
        problems.append(f"unknown stage {s[:40]!r}")
    return "The reader has no such view: " + ", ".join(problems or ["unknown view"]) + "."


def _origins(request: Request) -> tuple[str, set[str]]:
    """The origin to link to (the public one when configured) and every origin we answer for."""
    here = str(request.base_url).rstrip("/")
    public = _state(request).settings.PUBLIC_BASE_URL
    if not public:
        return here, {here}
    parts = urlsplit(public)
    preferred = f"{parts.scheme}://{parts.netloc}"
    return preferred, {here, preferred}


def _embedded_view(request: Request, url: str) -> tuple[str, PathId, StageId] | str:
    """The origin to link to and the reader view that `url` names (the site's default
    view for the root), or why it names none of this site's views."""
    parts = urlsplit(url)
    origin, own = _origins(request)
    if parts.scheme or parts.netloc:
        origin = f"{parts.scheme}://{parts.netloc}"
        if origin not in own:
            return "url: not a URL of this site"
    if parts.path in ("", "/"):
        site = _state(request).content.site
        return origin, site.default_path, site.default_stage
    m = _READER_URL.match(parts.path)
    valid_p = {x.value for x in READER_PATHS}
    valid_s = {x.value for x in READER_STAGES}
    if not m or m.group(1) not in valid_p or m.group(2) not in valid_s:
        return "url: not a reader page"
    return origin, PathId(m.group(1)), StageId(m.group(2))


def _embed(
    request: Request, view: tuple[str, PathId, StageId], width: int, height: int
) -> Response:
    """The oEmbed answer for a reader view: a frame of its embed page, `width` × `height`,
    and the script that sizes the frame to the card."""
    origin, path, stage = view
    state = _state(request)
    card = state.content.card(path, stage)
    src = origin + embed_url(path, stage)
    title = card.title.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
    host_script = origin + state.assets["embed-host.js"].url  # sizes the frame to the card
    html = (
        f'<iframe src="{src}" width="{width}" height="{height}" title="{title}" '
        'loading="lazy" frameborder="0"></iframe>'
        f'<script src="{host_script}" async></script>'
    )
    return JSONResponse(
        {
            "version": "1.0",
            "type": "rich",
            "provider_name": "Boundary",
            "provider_url": origin + "/",
            "title": card.title,
            "html": html,
            "width": width,
            "height": height,
            "cache_age": 3600,
        }
    )


async def oembed(
    request: Request,
    url: Annotated[str, Query(max_length=2048, description="A reader or embed URL.")],
    maxwidth: Annotated[int | None, Query(ge=1, le=MAX_DIMENSION)] = None,
    maxheight: Annotated[int | None, Query(ge=1, le=MAX_DIMENSION)] = None,
    format: Annotated[str, Query(pattern="^(json|xml)$")] = "json",
) -> Response:
    """oEmbed (type `rich`) for this site's reader URLs; 404 for any other URL."""
    if format != "json":
        return JSONResponse({"detail": "format: only json is supported"}, status_code=501)
    view = _embedded_view(request, url)
    if isinstance(view, str):
        return JSONResponse({"detail": view}, status_code=404)
    width = min(EMBED_WIDTH, maxwidth or EMBED_WIDTH)
    height = min(EMBED_HEIGHT, maxheight or EMBED_HEIGHT)
    return _embed(request, view, width, height)


def install(app: FastAPI) -> None:
    """Add the page routes and the 404 handler to `app`."""
    errors.install(
        app, lambda request: not_found_page(request, _describe_unknown(request.url.path))
    )

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
        # FastAPI's own answer echoes the input; ours names the field and says what is
        # allowed, like every other 422 of this app. A browser asking for a page gets a
        # site page saying the same.
        problems = request_problems(exc.errors())
        path = request.url.path
        if request.method in ("GET", "HEAD") and errors.wants_html(path):
            return errors.bad_address_page(request, problems)
        return JSONResponse({"detail": problems}, status_code=422)

    @app.api_route("/healthz", methods=["GET", "HEAD"], include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    app.add_api_route(
        "/oembed",
        oembed,
        methods=["GET"],
        tags=["reader"],
        responses={
            404: {"model": MessagePublic, "description": "Not a reader URL of this site."},
            501: {"model": MessagePublic, "description": "format=xml: only JSON is served."},
        },
    )
    # HEAD answers like GET (FastAPI's @get alone would answer 405); kept out of the schema.
    app.add_api_route("/oembed", oembed, methods=["HEAD"], include_in_schema=False)
