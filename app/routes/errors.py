"""Error pages: every 404, 500 and 507 a browser sees is a site page in its section's words.

Machine routes (the API, `.json`/`.csv`/`.md` twins, downloads, oEmbed, metrics) keep
answering JSON, so clients never have to parse HTML to learn what went wrong.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from app.routes.common import render
from app.state import state_of_scope
from app.web.diskfull import DISK_FULL, is_disk_full
from app.web.diskfull import KINDS as DISK_KINDS

log = logging.getLogger("boundary.errors")

CLIENT_CLOSED = 499
"""What a request the client hung up on before its body arrived is logged with (nginx's
"client closed request"): nobody reads the answer, and it is no fault of the server's."""

MACHINE_SUFFIXES = (".json", ".csv", ".md", ".gz", ".tar.gz", ".txt")
MACHINE_PREFIXES = ("/api/", "/oembed", "/metrics", "/healthz", "/readyz", "/openapi")


@dataclass(frozen=True)
class Section:
    """Where an error happened, named the way that part of the site names things."""

    prefix: str
    label: str
    nav: str
    missing: str
    hint: str
    links: tuple[tuple[str, str], ...]


SECTIONS: tuple[Section, ...] = (
    Section(
        "/runs",
        "Runs",
        "runs",
        "No such run",
        "A run's address is /runs/ followed by its id; every run this server keeps is listed "
        "under Runs, newest first.",
        (("Every run", "/runs"), ("Run a workload", "/runs/new")),
    ),
    Section(
        "/compare",
        "Comparison",
        "runs",
        "Nothing to compare there",
        "A comparison names runs this server keeps: open a finished run and follow Compare with…",
        (("Every run", "/runs"), ("How to start a comparison", "/compare")),
    ),
    Section(
        "/matrices",
        "Matrices",
        "matrices",
        "No such matrix",
        "Every matrix this server keeps is listed under Matrices.",
        (("Every matrix", "/matrices"), ("New matrix", "/matrices/new")),
    ),
    Section(
        "/artifacts",
        "Your function",
        "artifacts",
        "No such uploaded file",
        "Uploaded files are named by their SHA-256; upload yours again to get its page.",
        (("Upload a function", "/artifacts/new"),),
    ),
    Section(
        "/workers",
        "Workers",
        "workers",
        "No such page",
        "",
        (("Connected workers", "/workers"),),
    ),
)


class MissingPart(StarletteHTTPException):
    """404 for a part of something that exists (a run without that IR): the page says so
    under its own heading and links back to the whole, not "No such run"."""

    def __init__(self, detail: str, heading: str, back: tuple[str, str]) -> None:
        super().__init__(status_code=404, detail=detail)
        self.heading = heading
        self.back = back


SITE = Section(
    "/",
    "Boundary",
    "",
    "Not found",
    "",
    (("The reader", "/"), ("The guide", "/guide"), ("Runs", "/runs")),
)


def wants_html(path: str) -> bool:
    """Whether a browser page lives at `path` (else a client expects JSON)."""
    return not (path.startswith(MACHINE_PREFIXES) or path.endswith(MACHINE_SUFFIXES))


def section_of(path: str) -> Section | None:
    """The bench section `path` belongs to; None for the reader and the rest of the site."""
    for s in SECTIONS:
        if path == s.prefix or path.startswith(s.prefix + "/") or path.startswith(s.prefix + "?"):
            return s
    return None


def _detail_text(detail: Any) -> str:
    """An HTTPException's detail as one sentence (it may be a list of field errors)."""
    if isinstance(detail, list):
        parts = [str(d.get("message", d)) if isinstance(d, dict) else str(d) for d in detail]
        return "; ".join(parts)
    text = str(detail)
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def error_page(
    request: Request, status_code: int, heading: str, what: str, section: Section
) -> HTMLResponse:
    """A site page (navigation, the section's own links) with `status_code`."""
    ctx = {
        "nav": section.nav,
        "status_code": status_code,
        "heading": heading,
        "what": what,
        "section": section,
    }
    return render(state_of_scope(request.scope), "error.html", ctx, status_code)


def bad_address_page(request: Request, problems: list[dict[str, str | None]]) -> HTMLResponse:
    """422 as a site page: a query value the page cannot use (`?start=-5`, `?step=abc`),
    each named in plain words, with a link to the page without them."""
    path = request.url.path
    section = section_of(path) or SITE
    said = "; ".join(str(p["message"]) for p in problems) or "a value is not one it takes"
    what = f"This page's address asks for something it cannot show: {said}."
    back = replace(
        section, hint="", links=(("The page without those values", path), *section.links)
    )
    return error_page(request, 422, "Not a value this page takes", what, back)


def allowed_methods(app: Any, path: str) -> list[str]:
    """Every method a route of `app` answers at `path`. Starlette's 405 names only the
    methods of the first route whose path matched (POST for /api/v1/jobs, whose GET and
    HEAD are other routes); an included router keeps its routes in `original_router`."""
    found: set[str] = set()
    stack: list[Any] = list(app.router.routes)
    while stack:
        route = stack.pop()
        inner = getattr(route, "original_router", None)
        if inner is not None:
            stack.extend(inner.routes)
            continue
        regex, methods = getattr(route, "path_regex", None), getattr(route, "methods", None)
        if regex is not None and methods and regex.match(path):
            found |= set(methods)
    return sorted(found)


def install(app: FastAPI, reader_not_found: Any) -> None:
    """The handlers: `reader_not_found(request)` answers 404s outside the bench sections."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        path = request.url.path
        section = section_of(path)
        if exc.status_code == 404 and section is None and not path.startswith("/api/"):
            result: Response = reader_not_found(request)  # lists valid paths (HTML or JSON)
            return result
        if exc.status_code == 404 and section is not None and wants_html(path):
            if isinstance(exc, MissingPart):
                part = replace(section, hint="", links=(exc.back, *section.links))
                return error_page(request, 404, exc.heading, _detail_text(exc.detail), part)
            return error_page(request, 404, section.missing, _detail_text(exc.detail), section)
        headers = exc.headers
        if exc.status_code == 405:  # every method the path answers, not the first route's
            headers = {**(headers or {}), "Allow": ", ".join(allowed_methods(request.app, path))}
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)

    async def disk_full(request: Request, exc: Exception) -> Response:
        if not is_disk_full(exc):
            raise exc  # any other error stays a 500
        log.error("507 on %s %s: %r", request.method, request.url.path, exc)
        path = request.url.path
        if not wants_html(path):
            return JSONResponse({"detail": DISK_FULL}, 507)
        what = (
            "The server's disk is full, so it could not keep what you sent; nothing of it "
            "was stored. Try again once the server's operator has made room."
        )
        section = section_of(path) or SITE
        return error_page(request, 507, "The server's disk is full", what, section)

    for kind in DISK_KINDS:
        app.add_exception_handler(kind, disk_full)

    @app.exception_handler(ClientDisconnect)
    async def hung_up(request: Request, exc: ClientDisconnect) -> Response:
        # A client that closes its connection mid-body (a worker giving up on a progress
        # report, a script stopped) is no 500: a line of log, no traceback.
        log.info("%s %s: the client hung up before its body arrived", request.method,
                 request.url.path)  # fmt: skip
        return Response(status_code=CLIENT_CLOSED)

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception) -> Response:
        # Starlette logs the traceback after this handler answers; say what failed here.
        log.error("500 on %s %s: %r", request.method, request.url.path, exc)
        path = request.url.path
        if not wants_html(path):
            return JSONResponse({"detail": "internal error: the server logged it"}, 500)
        section = section_of(path) or SITE
        what = (
            "This page failed to build because of a fault in Boundary, not because of "
            "anything you asked for. The server logged the error; the data behind the page "
            "is unchanged."
        )
        return error_page(request, 500, "Something broke on this server", what, section)
