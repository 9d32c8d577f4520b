"""What the routers share: rendering a page, telling an htmx request apart, the paths
connected workers offer, and the IR view's query parameters. Validation errors in plain
words are in app.web.problems.

Routers import these from here rather than from one another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Query, Request
from fastapi.responses import HTMLResponse

from app.ir.sent import SentLines
from app.ir.view import IrView, SourceText, build_view
from app.state import AppState
from app.web.templating import server_linker

if TYPE_CHECKING:
    from app.dispatch import Dispatcher


@dataclass
class IrQuery:
    """The IR view's query parameters, each usable without JavaScript: `start` the page (or,
    with `part=lines`, the line) to show from, `q` a search, `src` the source line whose IR
    lines are marked; `part=lines` answers only the next lines, as scrolling loads them."""

    start: Annotated[int | None, Query(ge=1, le=10**9)] = None
    q: Annotated[str, Query(max_length=200)] = ""
    src: Annotated[str, Query(max_length=400)] = ""
    part: Annotated[str, Query(pattern="^(lines)?$")] = ""

    def view(
        self,
        name: str,
        text: str,
        base: str,
        source: SourceText | None,
        request: Request,
        *,
        sent: SentLines | None = None,
        uploaded: bool = False,
        cut: bool = False,
    ) -> IrView:
        """The view these parameters ask for of artifact `name` (served at `base`). A
        part, or the view htmx puts into a page, is a short first page, the rest loading
        as it scrolls into view, which keeps each main-thread task short. `sent`: the
        Python lines sent with an uploaded program (`uploaded`)."""
        part = self.part == "lines" or is_htmx(request)
        return build_view(
            name,
            text,
            base,
            start=self.start,
            q=self.q.strip(),
            src=self.src,
            source=source,
            part=part,
            sent=sent,
            uploaded=uploaded,
            cut=cut,
        )


IrQueryDep = Annotated[IrQuery, Depends()]


def is_htmx(request: Request) -> bool:
    """True for an htmx request that wants a fragment (not a history restore)."""
    return (
        request.headers.get("hx-request") == "true"
        and "hx-history-restore-request" not in request.headers
        and request.headers.get("hx-request-type") != "full"
    )


def render(
    state: AppState, template: str, ctx: dict[str, Any], status_code: int = 200
) -> HTMLResponse:
    """A template with what base.html needs, as an uncached HTML response."""
    assets = state.assets
    html = state.env.get_template(template).render(
        site=state.content.site,
        content_version=state.content.version,
        link=server_linker(""),
        static=lambda name: assets[name].url,
        export=False,
        embed=False,
        **ctx,
    )
    return HTMLResponse(html, status_code, headers={"Cache-Control": "no-store"})


def connected_paths(dispatcher: Dispatcher) -> list[str]:
    """The paths some connected worker offers, in the order they were first seen."""
    paths: list[str] = []
    for w in dispatcher.recent_workers():
        for p in w.capabilities.paths:
            if p.value not in paths:
                paths.append(p.value)
    return paths
